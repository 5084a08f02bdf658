"""Reading a side's files (log, checkpoint) on whatever host holds them, with a timeout.

Local files are read directly; remote ones through the host (stat / cat), so a hung NFS mount or a lost
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
from dataclasses import dataclass
from typing import TypeVar

from ops.platform.base import Host

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


async def _local(path: str, fn: Callable[[], T], timeout: float) -> T:
    """fn() inline when path is on a disk filesystem, else in a thread (TimeoutError after timeout)."""
    if await _policy.inline(path, timeout):
        return fn()
    return await asyncio.wait_for(asyncio.to_thread(fn), timeout)


@dataclass(frozen=True)
class FileStat:
    exists: bool
    mtime: float | None = None
    size: int | None = None
    host_now: float | None = None    # the host's clock when stat ran: ages are computed on one clock
    error: str | None = None
    took_ms: float = 0.0


async def stat_file(host: Host, path: str, timeout: float) -> FileStat:
    t0 = time.perf_counter()
    if host.is_local:
        def _stat() -> FileStat:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return FileStat(exists=False, host_now=time.time())
            return FileStat(exists=True, mtime=st.st_mtime, size=st.st_size, host_now=time.time())
        try:
            fs = await _local(path, _stat, timeout)
        except asyncio.TimeoutError:
            return FileStat(exists=False, error=f"stat {path}: timeout after {timeout} s",
                            took_ms=(time.perf_counter() - t0) * 1e3)
        except OSError as e:
            return FileStat(exists=False, error=f"stat {path}: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
        return FileStat(fs.exists, fs.mtime, fs.size, fs.host_now, None, (time.perf_counter() - t0) * 1e3)
    if host.os == "windows":
        return FileStat(exists=False, error="reading evaluator files on a Windows host is not supported",
                        took_ms=0.0)
    # One constant script; the path travels as a positional argument, never pasted into the script.
    res = await host.run(["sh", "-c", 'date +%s.%N; if [ -e "$1" ]; then stat -c "%.9Y %s" "$1"; '
                          'else echo missing; fi', "stat_file", path], timeout=timeout)
    took = (time.perf_counter() - t0) * 1e3
    if not res.ok:
        return FileStat(exists=False, error=f"stat {path} on {host.name}: {res.why()}", took_ms=took)
    lines = res.stdout.split("\n")
    try:
        now = float(lines[0])
        if lines[1].strip() == "missing":
            return FileStat(exists=False, host_now=now, took_ms=took)
        mtime, size = lines[1].split()
        return FileStat(exists=True, mtime=float(mtime), size=int(size), host_now=now, took_ms=took)
    except (ValueError, IndexError):
        return FileStat(exists=False, error=f"stat {path} on {host.name}: unparseable {res.stdout[:200]!r}",
                        took_ms=took)


@dataclass(frozen=True)
class FileText:
    text: str | None
    error: str | None = None
    missing: bool = False


async def read_text(host: Host, path: str, timeout: float, limit: int = MAX_READ) -> FileText:
    if host.is_local:
        def _read() -> FileText:
            try:
                with open(path, "rb") as f:
                    data = f.read(limit + 1)
            except FileNotFoundError:
                return FileText(None, missing=True)
            if len(data) > limit:
                return FileText(None, error=f"{path} is larger than {limit} bytes")
            return FileText(data.decode("utf-8", "replace"))
        try:
            return await _local(path, _read, timeout)
        except asyncio.TimeoutError:
            return FileText(None, error=f"read {path}: timeout after {timeout} s")
        except OSError as e:
            return FileText(None, error=f"read {path}: {e}")
    res = await host.run(["head", "-c", str(limit + 1), path], timeout=timeout)
    if not res.ok:
        if "No such file" in res.stderr:
            return FileText(None, missing=True)
        return FileText(None, error=f"read {path} on {host.name}: {res.why()}")
    if len(res.stdout) > limit:
        return FileText(None, error=f"{path} is larger than {limit} bytes")
    return FileText(res.stdout)


async def tail_lines(host: Host, path: str, n: int, timeout: float, max_bytes: int = 16384) -> list[str] | None:
    """The last n lines of a log (None when they cannot be read)."""
    if host.is_local:
        def _tail() -> list[str] | None:
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    size = f.tell()
                    f.seek(max(0, size - max_bytes))
                    data = f.read()
            except OSError:
                return None
            return data.decode("utf-8", "replace").splitlines()[-n:]
        try:
            return await _local(path, _tail, timeout)
        except asyncio.TimeoutError:
            return None
    res = await host.run(["tail", "-n", str(n), path], timeout=timeout)
    return res.stdout.splitlines()[-n:] if res.ok else None
