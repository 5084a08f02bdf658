"""Reading a side's files (log, checkpoint) on whatever host holds them, with a timeout.

Each host's Platform does the reading (ops/platform/linux_local.py, linux_remote.py, windows.py). Local
files are read directly; remote ones through the host (stat / cat), so a hung NFS mount or a lost
SSH link is a timeout answered as an error, never a frozen poll. A local file on a disk filesystem is
read inline; on anything else (NFS, CIFS, FUSE, a cluster filesystem, a type not known here) the read
runs in a thread under the timeout, because a hard mount whose server went away blocks its caller for
good. Most polls read files on local disks, and the thread hop cost more than the read itself.
"""
from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from typing import TypeVar

from ops.platform.base import Host
from ops.platform.types import FileStat, FileText

MAX_READ = 16 * 1024 * 1024
MOUNTS_TTL_S = 60.0    # the mount table and each path's resolved mount are looked at again after this
# Filesystems whose calls return or fail promptly (block devices and memory): read inline.
DISK_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs",
                     "nilfs2", "vfat", "msdos", "exfat", "ntfs3", "hfsplus", "squashfs", "tmpfs", "ramfs",
                     "overlay"})

T = TypeVar("T")


def parse_mountinfo(text: str) -> dict[str, str]:
    """mount point -> filesystem type, from /proc/self/mountinfo; a later line (mounted over) wins."""
    mounts: dict[str, str] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        mounts[_unescape(fields[4])] = tail[0]
    return mounts


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as octal escapes (a space is \040).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fs_type(mounts: dict[str, str], real_path: str) -> str | None:
    """The type of the filesystem holding real_path (an absolute path with no symlinks)."""
    path = real_path
    while True:
        if path in mounts:
            return mounts[path]
        if path == "/":
            return None
        path = os.path.dirname(path)


class _InlinePolicy:
    """Which local paths may be read inline: those on a disk filesystem (DISK_FS)."""

    def __init__(self) -> None:
        self._mounts: tuple[float, dict[str, str] | None] | None = None
        self._paths: dict[str, tuple[float, bool]] = {}

    def _mount_table(self, now: float) -> dict[str, str] | None:
        if self._mounts is None or now - self._mounts[0] >= MOUNTS_TTL_S:
            try:
                with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                    table: dict[str, str] | None = parse_mountinfo(f.read())
            except OSError:
                table = None   # cannot tell: every read goes to a thread
            self._mounts = (now, table)
        return self._mounts[1]

    async def inline(self, path: str, timeout: float) -> bool:
        now = time.monotonic()
        hit = self._paths.get(path)
        if hit is not None and now - hit[0] < MOUNTS_TTL_S:
            return hit[1]
        mounts = self._mount_table(now)
        try:
            # realpath follows symlinks (a local link may point into NFS): itself in a thread.
            real = await asyncio.wait_for(asyncio.to_thread(os.path.realpath, path), timeout)
        except (asyncio.TimeoutError, OSError):
            ok = False
        else:
            ok = mounts is not None and fs_type(mounts, real) in DISK_FS
        self._paths[path] = (now, ok)
        return ok


_policy = _InlinePolicy()


async def local_io(path: str, fn: Callable[[], T], timeout: float) -> T:
    """fn() inline when path is on a disk filesystem, else in a thread (TimeoutError after timeout)."""
    if await _policy.inline(path, timeout):
        return fn()
    return await asyncio.wait_for(asyncio.to_thread(fn), timeout)


async def stat_file(host: Host, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
    return await host.platform.stat_file(path, timeout, within_s)


async def read_text(host: Host, path: str, timeout: float, limit: int = MAX_READ) -> FileText:
    return await host.platform.read_text(path, timeout, limit)


async def tail_lines(host: Host, path: str, n: int, timeout: float, max_bytes: int = 16384) -> list[str] | None:
    """The last n lines of a log (None when they cannot be read)."""
    return await host.platform.tail_lines(path, n, timeout, max_bytes)
