"""The platform of the console's own machine: /proc, sock_diag and direct file reads, in-process.

Nothing here starts a process: a poll of a local side costs a few system calls, not a fork.
"""
from __future__ import annotations

import asyncio
import os
import signal as _signal
import stat
import time
from collections.abc import Iterable, Sequence

from ops.parse.sysinfo import parse_meminfo
from ops.platform.base import Host, Platform
from ops.platform.bounded import TooLarge, read_regular, read_tail
from ops.platform.files import local_io
from ops.platform.listeners import local_established, local_listeners, loopback_listeners
from ops.platform.procs import LocalProcScanner, ProcTable, read_proc
from ops.platform.types import FileStat, FileText, Listeners, SignalOutcome, TcpCheck
from ops.platform.verbs import BEAT_SHARE_S, peer_text, tcp_check
from ops.tristate import Evidence

# Create times are read from /proc in clock ticks: two reads of one process agree to well within this.
SAME_PROCESS_TOLERANCE_S = 0.05


class LinuxLocal(Platform):
    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.scanner = LocalProcScanner(host.name)

    async def process_table(self, timeout: float, fresh_pids: frozenset[int] = frozenset(),
                            within_s: float = 0.0) -> ProcTable:
        t0 = time.perf_counter()
        try:
            # The scan is ~2 ms in steady state: cheaper inline than a thread hop.
            return self.scanner.scan(fresh_pids)
        except OSError as e:
            return ProcTable(self.host.name, error=f"cannot read /proc: {e}",
                             took_ms=(time.perf_counter() - t0) * 1e3)

    async def signal_if_same(self, pid: int, create_time: float, sig: str, timeout: float,
                             cmdline: tuple[str, ...] | None = None) -> SignalOutcome:
        proc = read_proc(pid)
        if proc is None:
            return SignalOutcome("gone")
        if abs(proc.create_time - create_time) > SAME_PROCESS_TOLERANCE_S:
            return SignalOutcome("changed", f"pid {pid} now started at {proc.create_time:.2f}")
        # exec() keeps the pid and the start time: the argv tells the planned program from another one.
        # (A zombie's cmdline reads empty: Z has exited, Zl is the planned process exiting; both are signalled.)
        if cmdline is not None and proc.cmdline != tuple(cmdline) and not proc.state.startswith("Z"):
            return SignalOutcome("changed", f"pid {pid} now runs {proc.cmd_text(160)!r} (exec'd since the plan)")
        try:
            os.kill(pid, getattr(_signal, sig))
        except ProcessLookupError:
            return SignalOutcome("gone")
        except PermissionError as e:
            return SignalOutcome("error", str(e))
        return SignalOutcome("sent")

    async def listeners(self, timeout: float, interest: Iterable[int] = ()) -> Listeners:
        return local_listeners(self.host.name, interest)

    async def clients_connected(self, port: int, timeout: float) -> tuple[int | None, Evidence]:
        peers, ev = await self.client_peers(port, timeout)
        return (None if peers is None else len(peers)), ev

    async def client_peers(self, port: int, timeout: float) -> tuple[frozenset[str] | None, Evidence]:
        t0 = time.perf_counter()
        what = f"clients of {self.host.name}:{port}"
        peers, err = local_established(port)
        took = (time.perf_counter() - t0) * 1e3
        if err:
            return None, Evidence(what, False, error=err, took_ms=took)
        found = frozenset(f"{a}:{p}" for a, p in peers)
        return found, Evidence(what, True, detail=f"{len(found)} established" + peer_text(found), took_ms=took)

    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        """A listening socket in the kernel's table answers yes without a connection: a connect-and-close
        costs the console a loopback handshake every poll (most of an idle poll's CPU) and the server an
        accept. No is never taken from the table: "refused" is positive evidence a DEAD verdict may rest
        on, so it comes from a real connect, as it does for a remote host."""
        t0 = time.perf_counter()
        try:
            found = loopback_listeners(port, fresh_within_s=BEAT_SHARE_S)
        except (OSError, ValueError, IndexError):
            found = []   # the connect below answers instead
        if found:
            return TcpCheck(True, Evidence(f"tcp listen 127.0.0.1:{port}", True,
                                           detail="listening on " + ", ".join(found),
                                           took_ms=(time.perf_counter() - t0) * 1e3))
        return await tcp_check(self.host.tcp_address, port, timeout)

    async def stat_file(self, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
        t0 = time.perf_counter()

        def _stat() -> FileStat:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return FileStat(exists=False, host_now=time.time())
            if not stat.S_ISREG(st.st_mode):
                # A FIFO's or a device's mtime says nothing about a writer, and reading it would block.
                return FileStat(exists=True, error=f"{path} is not a regular file", host_now=time.time())
            return FileStat(exists=True, mtime=st.st_mtime, size=st.st_size, host_now=time.time())
        try:
            fs = await local_io(path, _stat, timeout)
        except asyncio.TimeoutError:
            return FileStat(exists=False, error=f"stat {path}: timeout after {timeout} s",
                            took_ms=(time.perf_counter() - t0) * 1e3)
        except OSError as e:
            return FileStat(exists=False, error=f"stat {path}: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
        return FileStat(fs.exists, fs.mtime, fs.size, fs.host_now, fs.error, (time.perf_counter() - t0) * 1e3)

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        def _read() -> FileText:
            try:
                # Never a FIFO or a device (O_NONBLOCK + fstat), and capped before decoding.
                data = read_regular(path, limit)
            except FileNotFoundError:
                return FileText(None, missing=True)
            except TooLarge:
                return FileText(None, error=f"{path} is larger than {limit} bytes")
            return FileText(data.decode("utf-8", "replace"))
        try:
            return await local_io(path, _read, timeout)
        except asyncio.TimeoutError:
            return FileText(None, error=f"read {path}: timeout after {timeout} s")
        except OSError as e:
            return FileText(None, error=f"read {path}: {e}")

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        def _tail() -> list[str] | None:
            try:
                data = read_tail(path, max_bytes)
            except OSError:
                return None
            return data.decode("utf-8", "replace").splitlines()[-n:]
        try:
            return await local_io(path, _tail, timeout)
        except asyncio.TimeoutError:
            return None

    async def memory(self, timeout: float) -> tuple[int, int] | str:
        try:
            with open("/proc/meminfo") as f:
                return parse_meminfo(f.read())
        except OSError as e:
            return f"{type(e).__name__}: {e}"

    async def disk_free(self, paths: Sequence[str], timeout: float) -> dict[str, tuple[str, int, int] | str]:
        # statvfs of a hung mount blocks its caller for good: in a thread, under the timeout.
        return await asyncio.wait_for(asyncio.to_thread(local_statvfs, paths), timeout)


def _existing(path: str) -> str:
    """The path, or its nearest existing ancestor (a checkpoint not written yet lives on its folder's fs)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _mount_of(path: str) -> str:
    dev = os.stat(path).st_dev
    p = path
    while True:
        parent = os.path.dirname(p)
        if parent == p or os.stat(parent).st_dev != dev:
            return p
        p = parent


def local_statvfs(paths: Iterable[str]) -> dict[str, tuple[str, int, int] | str]:
    """path -> (mount, free MiB for an unprivileged writer, total MiB), or the error."""
    out: dict[str, tuple[str, int, int] | str] = {}
    for path in paths:
        try:
            p = _existing(path)
            st = os.statvfs(p)
            out[path] = (_mount_of(p), st.f_bavail * st.f_frsize // 2**20, st.f_blocks * st.f_frsize // 2**20)
        except OSError as e:
            out[path] = f"{type(e).__name__}: {e}"
    return out
