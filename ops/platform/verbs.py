"""The operating-system verbs the console needs on any host: list processes, signal one exact process,
check a TCP port. Local hosts answer in-process; Linux remotes run packaged scripts (from files);
Windows hosts use the PowerShell command set in ops/platform/windows.py.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal as _signal
import socket
import time

from ops.platform.base import Host, ScriptUnavailable
from ops.platform.listeners import loopback_listeners
from ops.platform.procs import LocalProcScanner, ProcTable, parse_proctable_json, read_proc
from ops.platform.types import SignalOutcome, TcpCheck
from ops.tristate import Evidence

_scanners: dict[str, LocalProcScanner] = {}
# The sides polled on one beat share what a host was just asked (its process table, its listeners) when
# the answer is this recent; plans and verifications always ask afresh.
BEAT_SHARE_S = 0.25


def local_scanner(host: Host) -> LocalProcScanner:
    scanner = _scanners.get(host.name)
    if scanner is None:
        scanner = _scanners[host.name] = LocalProcScanner(host.name)
    return scanner


async def process_table(host: Host, timeout: float, fresh_pids: frozenset[int] = frozenset()) -> ProcTable:
    t0 = time.perf_counter()
    if host.is_local:
        try:
            # The scan is ~2 ms in steady state: cheaper inline than a thread hop.
            return local_scanner(host).scan(fresh_pids)
        except OSError as e:
            return ProcTable(host.name, error=f"cannot read /proc: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
    if host.os == "windows":
        from ops.platform import windows
        return await windows.process_table(host, timeout)
    try:
        script = await host.script_path("proctable.py")
    except ScriptUnavailable as e:
        return ProcTable(host.name, error=str(e), took_ms=(time.perf_counter() - t0) * 1e3)
    res = await host.run(["python3", script], timeout=timeout)
    took = (time.perf_counter() - t0) * 1e3
    if not res.ok:
        return ProcTable(host.name, error=f"process table of {host.name}: {res.why()}", took_ms=took)
    return parse_proctable_json(host.name, res.stdout, took)


async def signal_if_same(host: Host, pid: int, create_time: float, sig: str, timeout: float = 10.0) -> SignalOutcome:
    """Send SIGTERM/SIGKILL to pid only if it still has this create time (checked on the host itself)."""
    if host.is_local:
        proc = read_proc(pid)
        if proc is None:
            return SignalOutcome("gone")
        if abs(proc.create_time - create_time) > 0.05:
            return SignalOutcome("changed", f"pid {pid} now started at {proc.create_time:.2f}")
        try:
            os.kill(pid, getattr(_signal, sig))
        except ProcessLookupError:
            return SignalOutcome("gone")
        except PermissionError as e:
            return SignalOutcome("error", str(e))
        return SignalOutcome("sent")
    if host.os == "windows":
        from ops.platform import windows
        return await windows.stop_if_same(host, pid, create_time, timeout)
    try:
        script = await host.script_path("signal_if.py")
    except ScriptUnavailable as e:
        return SignalOutcome("error", str(e))
    res = await host.run(["python3", script, str(pid), repr(create_time), sig], timeout=timeout)
    if not res.ok:
        return SignalOutcome("error", res.why())
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
        return SignalOutcome(str(data["outcome"]), str(data.get("error", data.get("create_time", ""))))
    except (ValueError, KeyError, IndexError) as e:
        return SignalOutcome("error", f"unparseable reply ({e}): {res.stdout[:200]!r}")


async def tcp_check(address: str, port: int, timeout: float) -> TcpCheck:
    """Does address:port accept a TCP connection? A bare socket connect, closed at once: no stream
    objects, since this runs for every side on every poll."""
    t0 = time.perf_counter()
    what = f"tcp connect {address}:{port}"
    try:
        await asyncio.wait_for(_connect(address, port), timeout)
    except ConnectionRefusedError as e:
        took = (time.perf_counter() - t0) * 1e3
        return TcpCheck(False, Evidence(what, True, detail="refused", error=str(e), took_ms=took))
    except asyncio.TimeoutError:
        took = (time.perf_counter() - t0) * 1e3
        return TcpCheck(None, Evidence(what, False, error=f"timeout after {timeout} s", took_ms=took))
    except OSError as e:
        took = (time.perf_counter() - t0) * 1e3
        return TcpCheck(None, Evidence(what, False, error=f"{type(e).__name__}: {e}", took_ms=took))
    took = (time.perf_counter() - t0) * 1e3
    return TcpCheck(True, Evidence(what, True, detail="accepted", took_ms=took))


async def port_check(host: Host, port: int, timeout: float) -> TcpCheck:
    """Does host take TCP connections on port, as the console's polls ask every beat?

    On a local host a listening socket in the kernel's table answers yes without a connection: a
    connect-and-close costs the console a loopback handshake every poll (most of an idle poll's CPU) and
    the server an accept. No is never taken from the table: "refused" is positive evidence a DEAD verdict
    may rest on, so it comes from a real connect, as it does for a remote host."""
    if host.is_local:
        t0 = time.perf_counter()
        try:
            found = loopback_listeners(port, fresh_within_s=BEAT_SHARE_S)
        except (OSError, ValueError, IndexError):
            found = []   # the connect below answers instead
        if found:
            return TcpCheck(True, Evidence(f"tcp listen 127.0.0.1:{port}", True,
                                           detail="listening on " + ", ".join(found),
                                           took_ms=(time.perf_counter() - t0) * 1e3))
    return await tcp_check(host.tcp_address, port, timeout)


async def _connect(address: str, port: int) -> None:
    if address.endswith(".invalid"):   # RFC 6761: an address that could not be resolved (factory.py)
        raise OSError(f"{address}: the host's address is unresolved")
    loop = asyncio.get_running_loop()
    try:   # a numeric address needs no resolver (and no thread)
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await loop.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no address for {address}")
    errors: list[OSError] = []
    for family, type_, proto, _, addr in infos:   # localhost may be ::1 first: try each, as create_connection does
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
            return
        except OSError as e:
            errors.append(e)
        finally:
            sock.close()
    # Refused only when every address refused (positive absence); any other failure cannot tell.
    raise next((e for e in errors if not isinstance(e, ConnectionRefusedError)), errors[0])


def _local_established(port: int) -> tuple[list[tuple[str, int]], str | None]:
    """Remote ends of ESTABLISHED TCP connections to local port `port` (IPv4 and IPv6)."""
    peers: list[tuple[str, int]] = []
    errors = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, remote, st = parts[1], parts[2], parts[3]
                    if st != "01":   # ESTABLISHED
                        continue
                    if int(local.rsplit(":", 1)[1], 16) == port:
                        peers.append((remote.rsplit(":", 1)[0], int(remote.rsplit(":", 1)[1], 16)))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, IndexError) as e:
            errors.append(f"{path}: {e}")
    return peers, ("; ".join(errors) or None)


async def clients_connected(host: Host, port: int, timeout: float) -> tuple[int | None, Evidence]:
    """How many clients hold a connection to `port` on host; None when it cannot be told."""
    t0 = time.perf_counter()
    what = f"clients of {host.name}:{port}"
    if host.is_local:
        peers, err = _local_established(port)
        took = (time.perf_counter() - t0) * 1e3
        if err:
            return None, Evidence(what, False, error=err, took_ms=took)
        return len(peers), Evidence(what, True, detail=f"{len(peers)} established", took_ms=took)
    if host.os == "windows":
        from ops.platform import windows
        return await windows.clients_connected(host, port, timeout)
    res = await host.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], timeout=timeout)
    took = (time.perf_counter() - t0) * 1e3
    if not res.ok:
        return None, Evidence(what, False, error=res.why(), took_ms=took)
    n = len([ln for ln in res.stdout.splitlines() if ln.strip()])
    return n, Evidence(what, True, detail=f"{n} established", took_ms=took)
