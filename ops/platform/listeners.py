"""Which TCP ports a host listens on, and (when it can be told) which process owns each.

Local: the kernel's LISTEN sockets (sock_diag netlink; /proc/net/tcp{,6} where that is refused), owners
by matching each socket's inode against the `socket:[inode]` links in /proc/PID/fd (only for the ports
asked about: walking every fd of every process costs tens of ms). Remote Linux: `ss -Htlnp`. Windows:
Get-NetTCPConnection (ops/platform/windows.py).

An owner we cannot see (another user's process, no root) is None, never "nobody": the caller decides
whether an unknown owner could be the side's own server.
"""
from __future__ import annotations

import ipaddress
import os
import re
import sys
import time
from collections.abc import Iterable

from ops.platform.base import Host
from ops.platform.sock_diag import ListenSocket, listening_sockets
from ops.platform.types import Listeners

LISTEN = "0A"
ESTABLISHED = "01"


def proc_net_tcp(state: str) -> list[list[str]]:
    """The rows of /proc/net/tcp and tcp6 in one TCP state (the fields split). Raises OSError/ValueError
    on a bad read; a kernel without IPv6 just has no tcp6 rows."""
    rows: list[list[str]] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        rows.extend(parts for parts in (ln.split() for ln in lines) if len(parts) >= 10 and parts[3] == state)
    return rows


def listen_sockets() -> list[ListenSocket]:
    """This machine's LISTEN sockets: from sock_diag (ops/platform/sock_diag.py), or from /proc/net/tcp{,6} (slow:
    milliseconds a read) where the kernel cannot be asked that way. Raises OSError/ValueError on a bad read."""
    try:
        return listening_sockets()
    except OSError:
        pass
    out: list[ListenSocket] = []
    for parts in proc_net_tcp(LISTEN):
        addr, _, port = parts[1].partition(":")
        out.append(ListenSocket(int(port, 16), _proc_address(addr), int(parts[9])))
    return out


def local_established(port: int) -> tuple[list[tuple[str, int]], str | None]:
    """Remote ends of this machine's ESTABLISHED TCP connections to local `port` (IPv4 and IPv6), and the
    error when they could not be read."""
    try:
        rows = proc_net_tcp(ESTABLISHED)
        peers = [(remote.rsplit(":", 1)[0], int(remote.rsplit(":", 1)[1], 16))
                 for _, local, remote, *_rest in rows if int(local.rsplit(":", 1)[1], 16) == port]
    except (OSError, ValueError, IndexError) as e:
        return [], f"/proc/net/tcp: {e}"
    return peers, None


def _listen_inodes() -> dict[int, set[int]]:
    """port → socket inodes of LISTEN sockets (IPv4 and IPv6)."""
    out: dict[int, set[int]] = {}
    for sock in listen_sockets():
        out.setdefault(sock.port, set()).add(sock.inode)
    return out


# What a connect to 127.0.0.1 reaches: a socket bound to any address, to 127.0.0.1 itself, or (dual-stack,
# Linux's default) to IPv6 any or the mapped 127.0.0.1.
_LOOPBACK_REACHED = frozenset(ipaddress.ip_address(a) for a in ("0.0.0.0", "127.0.0.1", "::", "::ffff:127.0.0.1"))


def _proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp{,6} print each 32-bit word of an address as a native-endian hex number."""
    raw = b"".join(int(hex_addr[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hex_addr), 8))
    return ipaddress.ip_address(raw)


_recent: tuple[float, list[ListenSocket]] | None = None   # (monotonic time, sockets) of the last listing


def loopback_listeners(port: int, fresh_within_s: float = 0.0) -> list[str]:
    """The addresses of this machine's LISTEN sockets on port that a connect to 127.0.0.1:port reaches:
    what a connect would tell, without making one. fresh_within_s: a listing this recent will do (the
    sides of one beat share one). Raises OSError/ValueError on a bad read."""
    return [str(s.address) for s in _listing(fresh_within_s) if s.port == port and s.address in _LOOPBACK_REACHED]


def _listing(fresh_within_s: float) -> list[ListenSocket]:
    global _recent
    now = time.monotonic()
    if _recent is None or now - _recent[0] > fresh_within_s:
        _recent = (now, listen_sockets())
    return _recent[1]


def _inode_owners(inodes: set[int]) -> dict[int, int]:
    """inode → pid, for the inodes asked about; processes whose fds we cannot read are skipped."""
    want = {f"socket:[{i}]": i for i in inodes}
    found: dict[int, int] = {}
    if not want:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue  # another user's process, or gone
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            inode = want.get(link)
            if inode is not None:
                found.setdefault(inode, int(name))
        if len(found) == len(want):
            break
    return found


def local_listeners(host_name: str, interest: Iterable[int] = ()) -> Listeners:
    t0 = time.perf_counter()
    try:
        by_port = _listen_inodes()
    except (OSError, ValueError, IndexError) as e:
        return Listeners(host_name, error=f"cannot list listening sockets: {type(e).__name__}: {e}",
                         took_ms=(time.perf_counter() - t0) * 1e3)
    wanted = set(interest)
    inodes = {i for p, ins in by_port.items() if p in wanted for i in ins}
    owners = _inode_owners(inodes)
    ports: dict[int, frozenset[int | None]] = {}
    for port, ins in by_port.items():
        # Owners are only looked up for the ports asked about; the rest stay "unseen" (None).
        ports[port] = frozenset(owners.get(i) for i in ins) if port in wanted else frozenset([None])
    return Listeners(host_name, ports, took_ms=(time.perf_counter() - t0) * 1e3)


_SS_PID = re.compile(r"pid=([0-9]+)")


def parse_ss(host_name: str, text: str, took_ms: float = 0.0) -> Listeners:
    """`ss -Htlnp`: `LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:(("sshd",pid=1,fd=3))` per line."""
    ports: dict[int, set[int | None]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 5 or parts[0] != "LISTEN":
            return Listeners(host_name, error=f"unexpected ss line: {line[:200]!r}", took_ms=took_ms)
        local = parts[3]
        try:
            port = int(local.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return Listeners(host_name, error=f"unexpected ss address {local!r}", took_ms=took_ms)
        pids = [int(p) for p in _SS_PID.findall(" ".join(parts[5:]))]
        ports.setdefault(port, set()).update(pids or [None])
    return Listeners(host_name, {p: frozenset(o) for p, o in ports.items()}, took_ms=took_ms)


async def listeners(host: Host, timeout: float, interest: Iterable[int] = ()) -> Listeners:
    """The host's listening TCP ports; `interest`: ports whose owners must be resolved (local host)."""
    return await host.platform.listeners(timeout, interest)


def pid_listen_ports(pid: int, fresh_within_s: float = 0.0) -> frozenset[int] | str:
    """The TCP ports this machine's process `pid` listens on (its fds against the LISTEN sockets); an error
    string when it cannot be told (gone, another user's, the socket table unreadable). fresh_within_s: a
    socket listing this recent will do (a beat's sides share one)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as e:
        return f"/proc/{pid}/fd: {e.strerror or e}"
    mine: set[int] = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(int(link[8:-1]))
    try:
        socks = _listing(fresh_within_s)
    except (OSError, ValueError, IndexError) as e:
        return f"cannot list listening sockets: {type(e).__name__}: {e}"
    return frozenset(s.port for s in socks if s.inode in mine)
