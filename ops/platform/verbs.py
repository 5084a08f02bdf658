"""The operating-system verbs the console needs on any host: list processes, signal one exact process,
check a TCP port, count a port's clients. Each is answered by the host's Platform (ops/platform/base.py):
LinuxLocal in-process, LinuxRemote through packaged scripts (from files), Windows through PowerShell.
`tcp_check` itself is the one verb every platform shares: a bare connect from the console's machine.
"""
from __future__ import annotations

import asyncio
import socket
import time

from ops.platform.base import Host
from ops.platform.procs import ProcTable
from ops.platform.timeouts import within
from ops.platform.types import SignalOutcome, TcpCheck
from ops.tristate import Evidence

# The sides polled on one beat share what a host was just asked (its process table, its listeners) when
# the answer is this recent; plans and verifications always ask afresh.
BEAT_SHARE_S = 0.25


async def process_table(host: Host, timeout: float, fresh_pids: frozenset[int] = frozenset(),
                        within_s: float = 0.0) -> ProcTable:
    return await host.platform.process_table(timeout, fresh_pids, within_s)


async def signal_if_same(host: Host, pid: int, create_time: float, sig: str, timeout: float = 10.0,
                         cmdline: tuple[str, ...] | None = None) -> SignalOutcome:
    """Send SIGTERM/SIGKILL to pid only if it is still the planned process, checked on the host itself:
    the same create time and, when `cmdline` is given, the same argv. exec() keeps the pid and the start
    time, so a target that exec'd into another program since the plan passes the first test only."""
    return await host.platform.signal_if_same(pid, create_time, sig, timeout, cmdline=cmdline)


async def client_peers(host: Host, port: int, timeout: float) -> tuple[frozenset[str] | None, Evidence]:
    """The remote ends of ESTABLISHED connections to `port` on host; None when it cannot be told. Any
    process's connection counts: a server with a client is busy, whoever the client is."""
    return await host.platform.client_peers(port, timeout)


async def clients_connected(host: Host, port: int, timeout: float) -> tuple[int | None, Evidence]:
    """How many clients hold a connection to `port` on host; None when it cannot be told."""
    return await host.platform.clients_connected(port, timeout)


async def lasting_clients(host: Host, port: int, timeout: float, settle_s: float = 0.3) -> tuple[int | None, Evidence]:
    """Clients connected now and still connected settle_s later: an evaluator holds its connection for
    the whole run, while a console's own RPC probe (a connect, `version`, a close) does not, so a probe of
    another console never reads as a client."""
    first, ev = await client_peers(host, port, timeout)
    if not first:
        return (None if first is None else 0), ev
    await asyncio.sleep(settle_s)
    second, ev = await client_peers(host, port, timeout)
    if second is None:
        return None, ev
    both = first & second
    return len(both), Evidence(ev.what, True, detail=f"{len(both)} established for {settle_s:g} s"
                               + peer_text(both), took_ms=ev.took_ms)


def peer_text(peers: frozenset[str]) -> str:
    return f" ({', '.join(sorted(peers)[:5])})" if peers else ""


async def tcp_check(address: str, port: int, timeout: float) -> TcpCheck:
    """Does address:port accept a TCP connection? A bare socket connect, closed at once: no stream
    objects, since this runs for every side on every poll."""
    t0 = time.perf_counter()
    what = f"tcp connect {address}:{port}"
    try:
        await within(timeout, _connect(address, port))   # no task of its own: every full poll makes one
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
    """Does host take TCP connections on port, as the console's polls ask every beat? (A local host
    answers yes from the kernel's listener table: ops/platform/linux_local.py.)"""
    return await host.platform.port_check(port, timeout)


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

