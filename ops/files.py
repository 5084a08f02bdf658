"""Reading a side's files (log, checkpoint) on whatever host holds them, with a timeout.

Local files are read directly; remote ones through the host (stat / cat), so a hung NFS mount or a lost
SSH link is a timeout answered as an error, never a frozen poll.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from ops.hosts.base import Host

MAX_READ = 16 * 1024 * 1024


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
            fs = await asyncio.wait_for(asyncio.to_thread(_stat), timeout)
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
            return await asyncio.wait_for(asyncio.to_thread(_read), timeout)
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
            return await asyncio.wait_for(asyncio.to_thread(_tail), timeout)
        except asyncio.TimeoutError:
            return None
    res = await host.run(["tail", "-n", str(n), path], timeout=timeout)
    return res.stdout.splitlines()[-n:] if res.ok else None
