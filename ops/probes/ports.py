"""Port planning: every side's N, N+1, N+2 (server) and TM (evaluator) against winNAT's exclusion ranges,
the ports already in use, and the other sides.

Why before every launch: winNAT/Hyper-V reserve TCP ranges that move after a reboot, and a CARLA bind into
one crashes the server (0xe06d7363); Bench2Drive's default TM ports (50000+i*150) sit in a range winNAT
often takes; two sides left on TM 8000 collide silently.

Verdict per side, for the guard (RULES' `ports`): CLEAR (every planned port checked and free), CONFLICT
(at least one definite conflict), UNKNOWN (something could not be read: the exclusion table, a line of
it, the listening sockets, the owner of a port that is in use). UNKNOWN blocks launches (fail-closed).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ops.model import HostConfig, RigConfig, SideConfig
from ops.parse.errors import ParseError
from ops.parse.netsh import ExclusionRange, parse_excluded_ranges
from ops.platform.base import Host
from ops.platform.listeners import listeners
from ops.platform.procs import ProcTable
from ops.platform.types import Listeners
from ops.probes.chain import find_chain
from ops.probes.server import server_processes
from ops.rig import LiveRig
from ops.tristate import Evidence

NETSH_ARGS = ("int", "ipv4", "show", "excludedportrange", "protocol=tcp")
ROLES = ("rpc", "streaming", "secondary", "tm")
CLEAR, CONFLICT, UNKNOWN = "CLEAR", "CONFLICT", "UNKNOWN"
# Suggestions stay out of the privileged ports (a Linux server cannot bind them unprivileged).
MIN_SUGGESTED = 1024
MAX_PORT = 65535


@dataclass(frozen=True)
class Exclusions:
    """One host's exclusion table. state: READ | NONE (no winNAT: Linux) | UNKNOWN."""

    host: str
    state: str
    ranges: tuple[ExclusionRange, ...]
    evidence: Evidence
    unparsed: tuple[str, ...] = ()

    def find(self, port: int) -> ExclusionRange | None:
        return next((r for r in self.ranges if port in r), None)


def exclusions_from_text(host: str, text: str, what: str, took_ms: float = 0.0) -> Exclusions:
    parsed = parse_excluded_ranges(text)
    if isinstance(parsed, ParseError):
        return Exclusions(host, UNKNOWN, (), Evidence(what, False, error=f"{parsed.reason}: {parsed.text[:200]!r}",
                                                      took_ms=took_ms))
    detail = f"{len(parsed.ranges)} ranges" + ("" if parsed.separator_found else " (no dashed separator)")
    if parsed.unparsed:
        # A line we could not read may be the range that holds our port: the scan cannot say CLEAR.
        return Exclusions(host, UNKNOWN, parsed.ranges,
                          Evidence(what, False, detail=detail,
                                   error=f"{len(parsed.unparsed)} unreadable lines: {list(parsed.unparsed)[:3]}",
                                   took_ms=took_ms), parsed.unparsed)
    return Exclusions(host, "READ", parsed.ranges, Evidence(what, True, detail=detail, took_ms=took_ms))


def has_no_winnat(cfg: HostConfig) -> bool:
    """A Linux host with no netsh configured: winNAT does not exist there (the sim configures a fake)."""
    return cfg.os == "linux" and tuple(cfg.netsh) == ("netsh",)


async def read_exclusions(cfg: HostConfig, host: Host, timeout: float) -> Exclusions:
    argv = [*cfg.netsh, *NETSH_ARGS]
    what = f"{' '.join(argv)} on {cfg.name}"
    if has_no_winnat(cfg):
        return Exclusions(cfg.name, "NONE", (), Evidence(f"exclusion table of {cfg.name}", True,
                                                         detail="no winNAT on linux"))
    res = await host.run(argv, timeout=timeout)
    if not res.ok:
        return Exclusions(cfg.name, UNKNOWN, (), Evidence(what, False, error=res.why(), took_ms=res.took_s * 1e3))
    return exclusions_from_text(cfg.name, res.stdout, what, res.took_s * 1e3)


@dataclass(frozen=True)
class Conflict:
    port: int
    role: str
    kind: Literal["reserved", "in-use", "shared"]
    reason: str

    def to_json(self) -> dict:
        return {"port": self.port, "reason": self.reason, "role": self.role, "kind": self.kind}


@dataclass(frozen=True)
class SidePorts:
    side: str
    planned: tuple[int, int, int, int]
    conflicts: tuple[Conflict, ...]
    unknown: tuple[str, ...]                       # why a check could not be made
    suggestion: tuple[int, int, int, int] | None   # N, N+1, N+2, TM

    @property
    def verdict(self) -> str:
        if self.conflicts:
            return CONFLICT
        return UNKNOWN if self.unknown else CLEAR

    def to_json(self) -> dict:
        return {"planned": list(self.planned), "conflicts": [c.to_json() for c in self.conflicts],
                "suggestion": list(self.suggestion) if self.suggestion else None,
                "verdict": self.verdict, "unknown": list(self.unknown)}


@dataclass(frozen=True)
class OwnPids:
    """The side's own processes on each of its hosts; None where the process table was unreadable."""

    server: frozenset[int] | None
    evaluator: frozenset[int] | None


@dataclass(frozen=True)
class PortScan:
    hosts: dict[str, Exclusions]
    listeners: dict[str, Listeners]
    sides: dict[str, SidePorts]
    at: float

    @property
    def ranges(self) -> tuple[tuple[int, int, bool], ...]:
        """Every host's ranges together (one host in the usual rig), sorted, duplicates once."""
        return tuple(sorted({(r.start, r.end, r.administered) for e in self.hosts.values() for r in e.ranges}))

    def verdict(self, side: str) -> str:
        return self.sides[side].verdict

    @property
    def any_conflict(self) -> bool:
        return any(s.verdict == CONFLICT for s in self.sides.values())

    @property
    def any_unknown(self) -> bool:
        return any(s.verdict == UNKNOWN for s in self.sides.values())

    def evidence_lines(self, side: str | None = None) -> tuple[str, ...]:
        lines = [e.evidence.line() for e in self.hosts.values()]
        lines += [x.evidence().line() for x in self.listeners.values()]
        if side is not None:
            s = self.sides[side]
            lines += [f"port {c.port} ({c.role}): {c.reason}" for c in s.conflicts] + list(s.unknown)
        return tuple(lines)

    def to_json(self) -> dict:
        return {"ranges": [list(r) for r in self.ranges],
                "sides": {n: s.to_json() for n, s in self.sides.items()},
                "hosts": {n: {"state": e.state, "ranges": [[r.start, r.end, r.administered] for r in e.ranges],
                              "unparsed": list(e.unparsed), "evidence": e.evidence.line()}
                          for n, e in self.hosts.items()},
                "at": self.at}


# ------------------------------------------------------------------------------------------ pure logic

def _hosts_of(side: SideConfig, role: str) -> tuple[str, tuple[str, ...]]:
    """(the host the port is bound on, the hosts whose exclusion tables apply to it)."""
    if role == "tm":
        # TM listens in the evaluator; it is checked against the server host's table too, since on a WSL2
        # rig with mirrored networking Windows' reservations apply to WSL's binds.
        return side.evaluator.host, tuple(dict.fromkeys((side.evaluator.host, side.server.host)))
    return side.server.host, (side.server.host,)


def _own(own: OwnPids, role: str) -> frozenset[int] | None:
    return own.evaluator if role == "tm" else own.server


def _range_text(r: ExclusionRange) -> str:
    return f"[{r.start}, {r.end}]" + (" (administered)" if r.administered else "")


def assess(sides: Mapping[str, SideConfig], excl: Mapping[str, Exclusions], lst: Mapping[str, Listeners],
           own: Mapping[str, OwnPids]) -> dict[str, SidePorts]:
    """Conflicts, unknowns and a suggestion for every side (no I/O: the tests drive it directly)."""
    planned = {n: s.planned_ports for n, s in sides.items()}
    out: dict[str, SidePorts] = {}
    chosen: set[int] = set()   # ports given to earlier sides' suggestions: two suggestions never collide
    for name, side in sides.items():
        conflicts: list[Conflict] = []
        unknown: list[str] = []
        for port, role in zip(planned[name], ROLES):
            bound_on, tables = _hosts_of(side, role)
            for h in tables:
                e = excl[h]
                r = e.find(port)
                if r is not None:
                    conflicts.append(Conflict(port, role, "reserved",
                                              f"inside reserved range {_range_text(r)} on {h}"))
                if e.state == UNKNOWN:
                    unknown.append(f"port {port} ({role}): exclusion table of {h} unreadable: "
                                   f"{e.evidence.error}")
            conflicts += _in_use(port, role, bound_on, lst[bound_on], _own(own[name], role), unknown)
            for other, ports in planned.items():
                if other != name and port in ports:
                    conflicts.append(Conflict(port, role, "shared",
                                              f"shared with side {other} ({ROLES[ports.index(port)]} port)"))
            mine = [ROLES[i] for i, p in enumerate(planned[name]) if p == port]
            if len(mine) > 1 and role == mine[-1]:
                conflicts.append(Conflict(port, role, "shared", f"used twice by this side ({' and '.join(mine)})"))
        suggestion = None
        if conflicts and not unknown:
            others = {p for o, ps in planned.items() if o != name for p in ps} | chosen
            suggestion = suggest(side, excl, lst, own[name], others)
            if suggestion:
                chosen.update(suggestion)
        out[name] = SidePorts(name, planned[name], tuple(conflicts), tuple(dict.fromkeys(unknown)), suggestion)
    return out


def _in_use(port: int, role: str, host: str, lst: Listeners, own: frozenset[int] | None,
            unknown: list[str]) -> list[Conflict]:
    if not lst.ok:
        unknown.append(f"port {port} ({role}): listening ports of {host} unreadable: {lst.error}")
        return []
    owners = lst.owners(port)
    if not owners:
        return []
    if own is None:
        unknown.append(f"port {port} ({role}): in use on {host}, and its process table is unreadable: "
                       "cannot tell whether the listener is this side's own")
        return []
    strangers = sorted(p for p in owners if p is not None and p not in own)
    if strangers:
        return [Conflict(port, role, "in-use", f"in use on {host} by pid {', '.join(map(str, strangers))}")]
    if None in owners:
        if own:
            # The side's own server might be the unseen owner: neither CLEAR nor CONFLICT can be said.
            unknown.append(f"port {port} ({role}): in use on {host}, owner unreadable")
            return []
        return [Conflict(port, role, "in-use", f"in use on {host} by a process whose pid cannot be read")]
    return []   # held by the side's own running server/evaluator


def _free(port: int, bound_on: str, tables: tuple[str, ...], excl: Mapping[str, Exclusions],
          lst: Mapping[str, Listeners], own: frozenset[int] | None, taken: set[int]) -> bool:
    if not MIN_SUGGESTED <= port <= MAX_PORT or port in taken:
        return False
    if any(excl[h].find(port) is not None for h in tables):
        return False
    owners = lst[bound_on].owners(port)
    return not owners or (own is not None and all(p is not None and p in own for p in owners))


def _nearest(start: int, ok) -> int | None:
    """The port nearest to start (start first, then +1, -1, +2, -2, ...) for which ok(port) holds."""
    for d in range(0, MAX_PORT):
        for p in ((start,) if d == 0 else (start + d, start - d)):
            if MIN_SUGGESTED <= p <= MAX_PORT and ok(p):
                return p
        if start + d > MAX_PORT and start - d < MIN_SUGGESTED:
            return None
    return None


def suggest(side: SideConfig, excl: Mapping[str, Exclusions], lst: Mapping[str, Listeners], own: OwnPids,
            others: set[int]) -> tuple[int, int, int, int] | None:
    """The nearest N'..N'+2 and TM' outside every range, not in use, not another side's."""
    srv, srv_tables = _hosts_of(side, "rpc")
    ev, ev_tables = _hosts_of(side, "tm")

    def block_ok(n: int) -> bool:
        return all(_free(p, srv, srv_tables, excl, lst, own.server, others) for p in (n, n + 1, n + 2))

    n = _nearest(side.server.rpc_port, block_ok)
    if n is None:
        return None
    block = {n, n + 1, n + 2}
    tm = _nearest(side.evaluator.tm_port,
                  lambda p: p not in block and _free(p, ev, ev_tables, excl, lst, own.evaluator, others))
    return None if tm is None else (n, n + 1, n + 2, tm)


# ------------------------------------------------------------------------------------------ the scan

def own_pids(rig: RigConfig, side: SideConfig, tables: Mapping[str, ProcTable], local: Mapping[str, bool]) -> OwnPids:
    st = tables[side.server.host]
    server: frozenset[int] | None = None
    if st.ok:
        procs = server_processes(st, side.server.rpc_port, side.server.command)
        server = frozenset({p.pid for p in procs} | {d.pid for p in procs for d in st.descendants(p.pid)})
    et = tables[side.evaluator.host]
    evaluator = find_chain(et, rig, side, local=local[side.evaluator.host]).pids if et.ok else None
    return OwnPids(server, evaluator)


async def scan_ports(live: LiveRig, netsh_text: str | None = None, netsh_what: str = "--netsh-file") -> PortScan:
    """Scan every side of a live rig (ops.rig.LiveRig). netsh_text: an exclusion table to use for every
    host instead of asking the hosts (`ports --netsh-file`)."""
    rig: RigConfig = live.config
    hosts: dict[str, Host] = live.hosts
    names = sorted({h for s in rig.sides.values() for h in (s.server.host, s.evaluator.host)})
    timeout = max(s.server.probe_timeout_s for s in rig.sides.values())
    interest: dict[str, set[int]] = {n: set() for n in names}
    for s in rig.sides.values():
        interest[s.server.host].update(s.server.ports)
        interest[s.evaluator.host].add(s.evaluator.tm_port)

    async def excl_of(n: str) -> Exclusions:
        if netsh_text is not None:
            return exclusions_from_text(n, netsh_text, netsh_what)
        return await read_exclusions(rig.hosts[n], hosts[n], timeout)

    excl_l, lst_l, tables = await asyncio.gather(
        asyncio.gather(*(excl_of(n) for n in names)),
        asyncio.gather(*(listeners(hosts[n], timeout, interest[n]) for n in names)),
        live.prober.tables(set(names), timeout))
    excl = dict(zip(names, excl_l))
    lst = dict(zip(names, lst_l))
    local = {n: hosts[n].is_local for n in names}
    own = {n: own_pids(rig, s, tables, local) for n, s in rig.sides.items()}
    return PortScan(excl, lst, assess(rig.sides, excl, lst, own), time.time())
