"""Reading a local file that may be anything: bounded in bytes before decoding, never blocking on open.

A FIFO where a checkpoint should be froze the whole console on `open()` (it waits for a writer); /dev/zero
given as a tool's output file grew the process to gigabytes, because the cap was applied after the read.
So: open with O_NONBLOCK (a FIFO opens at once), fstat the open descriptor (no race with a rename) and
refuse anything that is not a regular file, then read at most `limit + 1` bytes.
"""
from __future__ import annotations

import os
import stat


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a directory: never read on the console's paths."""


class TooLarge(OSError):
    """More bytes than the caller's cap: nothing was decoded."""


_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return word
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> int:
    """An fd of a regular file (the caller closes it); NotRegularFile for anything else."""
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file: not read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_upto(fd: int, n: int) -> bytes:
    chunks = []
    left = n
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole file, when it is a regular file of at most `limit` bytes (TooLarge otherwise)."""
    fd = open_regular(path)
    try:
        data = _read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(f"{os.fspath(path)} is larger than {limit} bytes: not read")
    return data


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """At most the last `max_bytes` of a regular file."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - max_bytes), os.SEEK_SET)
        return _read_upto(fd, max_bytes)
    finally:
        os.close(fd)
