"""Is a side's CARLA server ALIVE, DEAD or UNKNOWN?

ALIVE needs all three: a process with the side's exact `-carla-rpc-port=N` token, a TCP accept on N, and
the real carla client's get_server_version() from the side's pinned env. DEAD needs positive evidence of
absence: the process table was read and holds no such process, and N refused the connection. Anything
else — a timeout, a missing `carla`, an unreadable table, a process that holds the marker but does not
answer — is UNKNOWN, with the raw error kept.

HUNG is the exception that needs history: the same server process with its port accepting, and the RPC
call itself (client imported, connection made) unanswered in K consecutive probes spanning at least T
seconds (`server.hung_probes`, `server.hung_after_s`). The prober keeps that history (track_silence,
hung_verdict); a single silent probe stays UNKNOWN.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ops.model import RigConfig, SideConfig
from ops.platform.base import Host, ScriptUnavailable
from ops.platform.pinned import python_argv
from ops.platform.procs import Proc, ProcTable, read_proc
from ops.platform.types import TcpCheck
from ops.platform.verbs import port_check, process_table
from ops.probes.identity import is_server_program
from ops.tristate import Evidence, State, Verdict


def rpc_marker(port: int) -> str:
    return f"-carla-rpc-port={port}"


def server_processes(table: ProcTable, port: int, command: tuple[str, ...] | None = None) -> list[Proc]:
    """Every process of the server PROGRAM (`command`'s launcher or its shipping binary) carrying the
    exact marker, outer → inner (launcher before the shipping binary). A `watch pgrep -- -carla-rpc-port=N`
    carries the marker too: it is not a server. command None: the marker alone (only for code that then
    checks the program itself; every probe and plan passes the side's command)."""
    marker = rpc_marker(port)
    found = [p for p in table.with_tokens(marker) if p.state != "Z"
             and (command is None or is_server_program(p, command))]
    found.sort(key=lambda p: (p.create_time, p.pid))
    return found


def main_server(procs: list[Proc]) -> Proc | None:
    """The real server: the innermost process with the marker (the launcher's pid is not it)."""
    pids = {p.pid for p in procs}
    inner = [p for p in procs if not any(q.ppid == p.pid for q in procs if q.pid in pids)]
    return inner[-1] if inner else None


def adapter_of(proc: Proc | None) -> int | None:
    if proc is None or proc.cmdline is None:
        return None
    for tok in proc.cmdline:
        if tok.lower().startswith("-graphicsadapter="):
            try:
                return int(tok.split("=", 1)[1])
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class RpcCheck:
    version: str | None
    evidence: Evidence
    import_failed: bool = False
    silent: bool = False      # the client imported and called, and the call failed: the server did not answer


async def rpc_version(rig: RigConfig, side: SideConfig, ev_host: Host, address: str,
                      overhead_s: float = 20.0) -> RpcCheck:
    """get_server_version() with the real carla client, run in the side's pinned env from a script file."""
    t0 = time.perf_counter()
    timeout = side.server.probe_timeout_s
    what = f"carla get_server_version() {address}:{side.server.rpc_port} in env {side.evaluator.conda_env}"
    try:
        script = await ev_host.script_path("carla_probe.py")
    except ScriptUnavailable as e:
        return RpcCheck(None, Evidence(what, False, error=str(e), took_ms=(time.perf_counter() - t0) * 1e3))
    argv = python_argv(rig, side.evaluator, script, ["--host", address, "--port", str(side.server.rpc_port),
                                                     "--timeout", str(timeout)])
    # conda start-up plus the import of carla comes on top of the RPC timeout itself.
    res = await ev_host.run(argv, timeout=timeout + overhead_s)
    took = (time.perf_counter() - t0) * 1e3
    if not res.ok:
        return RpcCheck(None, Evidence(what, False, error=res.why(), took_ms=took))
    line = next((ln for ln in reversed(res.stdout.strip().splitlines()) if ln.startswith("{")), "")
    try:
        data = json.loads(line)
    except ValueError:
        return RpcCheck(None, Evidence(what, False, error=f"unparseable probe output: {res.stdout[-300:]!r} "
                                       f"{res.stderr[-300:]!r}", took_ms=took))
    if data.get("ok"):
        rpc_ms = float(data.get("took_ms", took))
        return RpcCheck(str(data["version"]), Evidence(what, True, detail=f"rpc {data['version']} in {rpc_ms:.0f} ms",
                                                        took_ms=took))
    return RpcCheck(None, Evidence(what, False, error=str(data.get("error")), took_ms=took),
                    import_failed=data.get("stage") == "import", silent=data.get("stage") == "rpc")


@dataclass(frozen=True)
class ServerProbe:
    verdict: Verdict
    pid: int | None = None
    create_time: float | None = None
    adapter: int | None = None
    procs: tuple[Proc, ...] = ()
    version: str | None = None
    rpc_at: float | None = None
    silent: bool = False      # this probe's RPC call went unanswered while the port accepted (one count)
    port_open: bool | None = None   # this probe's TCP check of the rpc port (None: not made, or no answer)
    tcp: TcpCheck | None = None     # that check itself (one a served side's beat showed again: PortSeen)
    # Set when the verdict is the supervisor's HUNG, not this probe's own (ops/probes/supervised_server.py).
    supervisor_measure: ServerMeasure | None = None
    supervisor_age_s: float | None = None


@dataclass(frozen=True)
class Silence:
    """Consecutive unanswered RPC probes of one server process (pid, create_time)."""

    pid: int
    create_time: float
    first_at: float
    last_at: float
    count: int


def track_silence(prev: Silence | None, probe: ServerProbe, probed: bool, now: float) -> Silence | None:
    """The silence after this probe. Any answer, a probe that could not measure (no carla, the probe
    command failed) or another server process starts the count again: HUNG needs K *consecutive*
    measured silences of the same process."""
    if probe.pid is None or probe.create_time is None:
        return None
    if prev is not None and (prev.pid, prev.create_time) != (probe.pid, probe.create_time):
        prev = None
    if not probed:
        return prev if probe.verdict.summary.startswith("process and port up") else None
    if not probe.silent:
        return None
    return Silence(probe.pid, probe.create_time, prev.first_at if prev else now, now, (prev.count if prev else 0) + 1)


def hung_verdict(probe: ServerProbe, silence: Silence | None, probes: int, over_s: float) -> ServerProbe:
    """HUNG once the same process stayed silent in `probes` consecutive RPC probes spanning `over_s`;
    between probes (rpc not due) a HUNG server whose process and port are still up stays HUNG."""
    if (silence is None or probe.verdict.state is not State.UNKNOWN or silence.count < probes
            or silence.last_at - silence.first_at < over_s):
        return probe
    span = silence.last_at - silence.first_at
    ev = probe.verdict.evidence + (Evidence("rpc silence", True, detail=(
        f"{silence.count} consecutive rpc probes unanswered over {span:.0f} s (HUNG at {probes} over "
        f"{over_s:.0f} s) by pid {silence.pid}")),)
    verdict = Verdict(State.HUNG, ev, f"process and port up, rpc silent in {silence.count} probes over {span:.0f} s")
    return replace(probe, verdict=verdict, version=None, rpc_at=None)


MeasuredState = Literal["ALIVE", "DEAD", "UNKNOWN", "HUNG"]


@dataclass(frozen=True)
class ServerMeasure:
    """A supervisor's measurement of its side's server (forced rpc probes, K of them over T s for HUNG), kept
    in harness.json: a one-shot `status` cannot measure HUNG itself, so it shows this one, with its age,
    while the same process still holds its port (ops/probes/supervised_server.py)."""

    state: MeasuredState
    summary: str
    pid: int | None
    create_time: float | None
    silent_probes: int            # consecutive unanswered rpc probes of that process (0: none)
    silent_since: float | None    # the first of them
    silent_last: float | None     # the last of them
    at: float                     # when the supervisor measured
    evidence: list[str]

    @classmethod
    def of(cls, probe: ServerProbe, silence: Silence | None, now: float) -> ServerMeasure:
        same = silence is not None and (silence.pid, silence.create_time) == (probe.pid, probe.create_time)
        return cls(probe.verdict.state.value, probe.verdict.summary, probe.pid, probe.create_time,
                   silence.count if same and silence else 0, silence.first_at if same and silence else None,
                   silence.last_at if same and silence else None, now,
                   [e.line() for e in probe.verdict.evidence])


@dataclass(frozen=True)
class PortSeen:
    """A server process's rpc port found accepting. A served side's display beat shows it again, with its
    age, instead of connecting anew (Prober): the side's evaluator ticks that server through that port
    every frame, so its FRESH heartbeat already shows the port answering, as it does the RPC (the connect
    to a remote host's namespace was a third of a 32-side beat's CPU). Only for the same process; a plan,
    a check or `g` connects."""

    pid: int
    create_time: float
    check: TcpCheck
    at: float   # time.time() of the connect

    def again(self, now: float) -> TcpCheck:
        ev = self.check.evidence
        return TcpCheck(self.check.open, replace(ev, detail=f"{ev.detail} {now - self.at:.0f} s ago, the side "
                                                             "served since", took_ms=0.0))

    def holds_for(self, procs: list[Proc]) -> bool:
        main = main_server(procs)
        return main is not None and (main.pid, main.create_time) == (self.pid, self.create_time)


def decide(table: ProcTable, procs: list[Proc], tcp: TcpCheck, rpc: RpcCheck | None, port: int) -> Verdict:
    ev: list[Evidence] = [table.evidence()]
    marker = rpc_marker(port)
    if table.ok:
        unreadable = [p.pid for p in table.procs.values() if p.cmdline is None]
        detail = (f"{len(procs)} with {marker}: " + ", ".join(str(p.pid) for p in procs)) if procs else f"none with {marker}"
        if not procs and unreadable:
            detail += f"; {len(unreadable)} cmdlines unreadable"
        ev.append(Evidence(f"processes with {marker}", True, detail=detail))
    ev.append(tcp.evidence)
    if rpc is not None:
        ev.append(rpc.evidence)
    evidence = tuple(ev)
    if not table.ok:
        return Verdict(State.UNKNOWN, evidence, f"process table unreadable: {table.error}")
    if procs:
        if tcp.open is True and rpc is not None and rpc.version:
            return Verdict(State.ALIVE, evidence, f"rpc {rpc.version} ({rpc.evidence.took_ms:.0f} ms)")
        if tcp.open is True and rpc is None:
            return Verdict(State.UNKNOWN, evidence, "process and port up; rpc not checked yet")
        if tcp.open is True:
            why = "carla unavailable in the probe env" if rpc and rpc.import_failed else "accepts but does not answer"
            return Verdict(State.UNKNOWN, evidence, f"{why}: {rpc.evidence.error if rpc else ''}")
        if tcp.open is False:
            return Verdict(State.UNKNOWN, evidence, f"process {procs[-1].pid} holds {marker} but port {port} refuses "
                           "(starting, or wedged)")
        return Verdict(State.UNKNOWN, evidence, f"port {port}: {tcp.evidence.error}")
    if any(p.cmdline is None for p in table.procs.values()):
        return Verdict(State.UNKNOWN, evidence, "no marker seen, but some cmdlines are unreadable (elevation?)")
    if tcp.open is False:
        return Verdict(State.DEAD, evidence, f"no process with {marker}; port {port} refused")
    if tcp.open is True:
        return Verdict(State.UNKNOWN, evidence, f"no process with {marker}, yet port {port} accepts: "
                       "something else holds it")
    return Verdict(State.UNKNOWN, evidence, f"no process with {marker}; port {port}: {tcp.evidence.error}")


async def probe_server(rig: RigConfig, side: SideConfig, hosts: dict[str, Host], *, with_rpc: bool = True,
                       table: ProcTable | None = None, rpc_overhead_s: float = 20.0,
                       port_seen: PortSeen | None = None) -> ServerProbe:
    host = hosts[side.server.host]
    port = side.server.rpc_port
    timeout = side.server.probe_timeout_s
    if table is None:
        table = await process_table(host, timeout)
    procs = server_processes(table, port, side.server.command) if table.ok else []
    if host.is_local and procs:
        # The scan's cache keeps a settled process's state as it was: a launcher that exited since (a
        # zombie until its parent reaps it) would still read as running. The few marker holders are
        # read again, fresh, before they are believed.
        procs = [q for p in procs if (q := read_proc(p.pid)) is not None and q.state != "Z"
                 and abs(q.create_time - p.create_time) <= 0.05]
    if port_seen is not None and port_seen.holds_for(procs):
        tcp = port_seen.again(time.time())
    else:
        tcp = await port_check(host, port, timeout)
    rpc = None
    if with_rpc and procs and tcp.open:
        rpc = await rpc_version(rig, side, hosts[side.evaluator.host], server_address(hosts, side),
                                overhead_s=rpc_overhead_s)
    verdict = decide(table, procs, tcp, rpc, port)
    main = main_server(procs)
    return ServerProbe(verdict=verdict, pid=main.pid if main else None,
                       create_time=main.create_time if main else None, adapter=adapter_of(main),
                       procs=tuple(procs), version=rpc.version if rpc else None,
                       rpc_at=time.time() if rpc and rpc.version else None,
                       silent=bool(rpc is not None and rpc.silent and tcp.open is True), port_open=tcp.open,
                       tcp=tcp)


def server_address(hosts: Mapping[str, Host], side: SideConfig) -> str:
    """The server's address as the evaluator's host reaches it: what the evaluator gets as `--host` (its
    default, localhost, is wrong whenever the server is elsewhere: WSL2's localhost is not the Windows
    host), what the RPC probe connects to. The console runs on the evaluator's host, so its own TCP checks
    of the server host use the same address (Host.tcp_address)."""
    if side.server.host == side.evaluator.host:
        return "127.0.0.1"
    return hosts[side.server.host].tcp_address
