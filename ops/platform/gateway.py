"""`@gateway`: the address of the default route, i.e. the Windows host as seen from WSL2.

WSL2's localhost is not the Windows host, and the host's address changes on every WSL restart, so it is
resolved when the console starts and never written back to the config. `ip route show` first; when the
`ip` tool is missing or fails, /proc/net/route. A failure is a GatewayError with both reasons; the
factory turns it into a host that answers every call with that error (UNKNOWN upstream).
"""
from __future__ import annotations

import ipaddress
import socket
import struct

from ops.platform.local import LocalHost

PROC_NET_ROUTE = "/proc/net/route"
_RTF_UP = 0x1
_RTF_GATEWAY = 0x2


class GatewayError(RuntimeError):
    pass


def parse_ip_route(text: str) -> str | None:
    """The gateway of the best `default via X ...` line (lowest metric, then first), or None."""
    best: tuple[int, int, str] | None = None
    for i, line in enumerate(text.splitlines()):
        words = line.split()
        if not words or words[0] != "default":
            continue
        via = _after(words, "via")
        if via is None:
            continue  # `default dev wg0 scope link`: no gateway address on that route
        if "linkdown" in words or "dead" in words:
            continue
        try:
            ipaddress.ip_address(via.split("%")[0])
        except ValueError:
            continue
        metric = _int(_after(words, "metric") or "0")
        cand = (metric, i, via)
        if best is None or cand < best:
            best = cand
    return best[2] if best else None


def parse_proc_net_route(text: str) -> str | None:
    """The gateway of the best default IPv4 route in /proc/net/route (hex, little-endian), or None."""
    best: tuple[int, int, str] | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines[1:]):  # the first line is the header
        f = line.split()
        if len(f) < 8:
            continue
        try:
            dest, gw, flags, metric, mask = int(f[1], 16), int(f[2], 16), int(f[3], 16), int(f[6]), int(f[7], 16)
        except ValueError:
            continue
        if dest != 0 or mask != 0 or not (flags & _RTF_UP) or not (flags & _RTF_GATEWAY) or gw == 0:
            continue
        addr = socket.inet_ntoa(struct.pack("<I", gw))
        cand = (metric, i, addr)
        if best is None or cand < best:
            best = cand
    return best[2] if best else None


def _after(words: list[str], key: str) -> str | None:
    try:
        return words[words.index(key) + 1]
    except (ValueError, IndexError):
        return None


def _int(s: str) -> int:
    try:
        return int(s)
    except ValueError:
        return 0


async def resolve_gateway(local: LocalHost | None = None, timeout: float = 3.0,
                          proc_route: str = PROC_NET_ROUTE) -> str:
    """The default gateway's address. Raises GatewayError naming what was tried and why it failed."""
    host = local or LocalHost()
    res = await host.run(["ip", "route", "show"], timeout)
    if res.ok:
        gw = parse_ip_route(res.stdout)
        if gw:
            return gw
        why_ip = "no 'default via' route in `ip route show`"
    else:
        why_ip = f"`ip route show` failed: {res.why()}"
    try:
        with open(proc_route, encoding="ascii", errors="replace") as f:
            gw = parse_proc_net_route(f.read())
    except OSError as e:
        raise GatewayError(f"cannot resolve @gateway: {why_ip}; {proc_route}: {e}") from e
    if gw:
        return gw
    raise GatewayError(f"cannot resolve @gateway: {why_ip}; no default gateway in {proc_route}")
