"""Free TCP ports on 127.0.0.1 for a sim rig: per side an RPC block N, N+1, N+2 and a TM port.

Picked outside the kernel's ephemeral range (an outgoing connection may take an ephemeral port at any
moment) and outside the rig's own fake winNAT exclusions (so the console's port scan is clean unless a
test wants a conflict). Every port is bind-tested; the race between the test and the server's own bind
is inherent, so rig.up retries a side whose server fails to come up.
"""
from __future__ import annotations

import random
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LOW, HIGH = 20000, 32000   # below the default ephemeral range 32768-60999
SPREAD = 150               # the least distance between planned ports of different roles


@dataclass(frozen=True)
class SidePorts:
    rpc: int
    tm: int

    @property
    def all(self) -> tuple[int, int, int, int]:
        return (self.rpc, self.rpc + 1, self.rpc + 2, self.tm)


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            lo, hi = (int(x) for x in fh.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Can we bind (and listen on) host:port right now? No SO_REUSEADDR: a TIME_WAIT port counts as busy."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        s.listen(1)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _excluded(port: int, ranges: Sequence[Sequence]) -> bool:
    return any(int(r[0]) <= port <= int(r[1]) for r in ranges)


def pick(n_sides: int, *, excluded: Sequence[Sequence] = (), avoid: Iterable[int] = (),
         rng: random.Random | None = None, attempts: int = 2000) -> list[SidePorts]:
    """n_sides disjoint SidePorts, all free now, none in `excluded` ranges or `avoid`."""
    rng = rng or random.Random()
    eph_lo, eph_hi = ephemeral_range()
    lo, hi = LOW, HIGH
    if eph_lo > LOW + 1000:
        hi = min(HIGH, eph_lo - 1)
    else:
        eph_lo, eph_hi = 0, -1   # the ephemeral range covers everything: nothing to steer around
    taken: set[int] = set(avoid)
    # Tens of sides do not fit SPREAD apart (2 anchors a side, each keeping 2*SPREAD clear): narrower then,
    # leaving random placement room enough (a third of the range used).
    spread = min(SPREAD, (hi - lo) // (12 * max(n_sides, 1)))

    def usable(port: int) -> bool:
        # Ports of different sides (and of one side's block and TM) stay SPREAD apart, so a test can put a
        # reserved range next to one side's port without catching another planned port by chance.
        return (lo <= port <= hi and not (eph_lo <= port <= eph_hi) and all(abs(port - t) > spread for t in taken)
                and not _excluded(port, excluded) and is_free(port))

    out: list[SidePorts] = []
    for _ in range(attempts):
        if len(out) == n_sides:
            break
        rpc = rng.randrange(lo, hi - 3)
        tm = rng.randrange(lo, hi)
        block = (rpc, rpc + 1, rpc + 2)
        if abs(tm - rpc) <= spread or not all(usable(p) for p in block) or not usable(tm):
            continue
        out.append(SidePorts(rpc=rpc, tm=tm))
        taken.update((*block, tm))
    if len(out) < n_sides:
        raise RuntimeError(f"could not find {n_sides} free port blocks in {lo}-{hi}")
    return out
