"""One snapshot of a side: the values status --json, the TUI panes and the guard's plans all read.

The poll is split by cost: the process table (cached scan), TCP connects, log and checkpoint stats run
every cycle; the carla-client RPC probe (a conda start plus `import carla`, ~1 s of CPU) runs every
`rpc_every_s` and always before a destructive plan. Between RPC probes a server whose process and port
are still up keeps the last RPC answer, shown with its age.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from ops.model import RigConfig, SideConfig
from ops.platform.base import Host
from ops.platform.files import tail_lines
from ops.platform.procs import ProcTable
from ops.platform.verbs import BEAT_SHARE_S, lasting_clients, process_table
from ops.probes.adapter_record import read_record
from ops.probes.evaluator import CheckpointCache, EvaluatorProbe, evaluator_files, probe_evaluator
from ops.probes.harness_state import StateCache
from ops.probes.heartbeat import HeartbeatProbe, probe_heartbeat
from ops.probes.lifecycle import FINAL_STATUSES, Lifecycle, LifecycleReading, derive, watched_beat
from ops.probes.server import PortSeen, ServerProbe, Silence, hung_verdict, probe_server, track_silence
from ops.probes.vram import Gpu, VramReading, read_vram
from ops.results.live import LiveResults, LiveResultsCache
from ops.tristate import Beat, Evidence, State, Verdict


@dataclass(frozen=True)
class SideSnapshot:
    name: str
    side: SideConfig
    server: ServerProbe
    vram: VramReading | None
    heartbeat: HeartbeatProbe
    evaluator: EvaluatorProbe
    log_tail: tuple[str, ...] = ()
    at: float = field(default_factory=time.time)
    took_ms: float = 0.0
    adapter_record: dict | None = None   # the last adapter polling accepted (state_dir/sides/SIDE/adapter.json)
    results: LiveResults | None = None   # ETA by town, DS/SR so far, fake-success (ops/results/live.py)
    job: dict | None = None              # a scheduled side's job (ops/engines: id, state, node), else None
    # Clients connected to the server's RPC port (any process: an evaluator started by hand without the
    # side's TM port is not in the chain, yet it drives the server). Measured by the prober whenever the
    # side would otherwise look empty; None: could not be told.
    clients: int | None = 0
    clients_evidence: Evidence | None = None

    @property
    def busy(self) -> bool:
        """The server has a client that is no evaluator of this side's chain: someone else drives it."""
        return (self.server.verdict.state is State.ALIVE and self.evaluator.verdict.state is State.DEAD
                and self.clients != 0)

    @property
    def idle(self) -> bool:
        """A server rendering for nobody: its evaluator finished or absent, no client, the server ALIVE."""
        return (self.server.verdict.state is State.ALIVE and self.evaluator.verdict.state is State.DEAD
                and not self.evaluator.harness_alive and self.clients == 0)

    @cached_property
    def life(self) -> LifecycleReading:
        return derive(self.evaluator)

    @property
    def lifecycle(self) -> Lifecycle:
        return self.life.state

    @property
    def beat_word(self) -> str:
        """The heartbeat as shown and acted on: OFF unless the side runs (a finished side is never STALE)."""
        return watched_beat(self.lifecycle, self.heartbeat.beat)

    @property
    def server_vram_mb(self) -> int | None:
        if self.vram is None or self.vram.apps is None:
            return None
        pids = {p.pid for p in self.server.procs}
        used = [self.vram.apps[p] for p in pids if p in self.vram.apps]
        if any(u is None for u in used):
            return None
        return sum(u for u in used if u is not None) if pids else None

    def gpu_of_server(self) -> Gpu | None:
        """The GPU this server renders on: the one adapter polling saw its VRAM rise on (for the adapter
        the server runs with now), else the only GPU. Adapter indices are not GPU indices (the Basic Render
        Driver counts too), so with several GPUs and no record the answer is unknown."""
        if self.vram is None:
            return None
        rec = self.adapter_record
        if rec and rec.get("adapter") == self.server.adapter and isinstance(rec.get("gpu"), int):
            return self.vram.gpu(rec["gpu"])
        return self.vram.gpu(self.vram.gpus[0].index) if len(self.vram.gpus) == 1 else None

    def to_json(self) -> dict:
        s, e, hb = self.server, self.evaluator, self.heartbeat
        gpu = self.gpu_of_server()
        harness = e.harness
        live = self.results.to_json() if self.results else None
        return {
            "lifecycle": self.lifecycle.value, "lifecycle_reason": self.life.reason,
            "server": {"state": s.verdict.state.value, "summary": s.verdict.summary,
                       "evidence": [ev.line() for ev in s.verdict.evidence], "pid": s.pid,
                       "create_time": s.create_time, "adapter": s.adapter, "version": s.version,
                       # HUNG needs K probes over T s: a one-shot reading shows the supervisor's, with its age.
                       "measured_by": "supervisor" if s.supervisor_measure is not None else "this probe",
                       "supervisor_measure": (None if s.supervisor_measure is None else
                                              {**asdict(s.supervisor_measure),
                                               "age_s": round(s.supervisor_age_s or 0.0, 1)}),
                       "adapter_record": self.adapter_record,
                       "host": self.side.server.host,
                       "ports": {"rpc": self.side.server.rpc_port, "streaming": self.side.server.rpc_port + 1,
                                 "secondary": self.side.server.rpc_port + 2, "tm": self.side.evaluator.tm_port}},
            "vram": {"used_mb": gpu.used_mb if gpu else None, "total_mb": gpu.total_mb if gpu else None,
                     "server_mb": self.server_vram_mb, "gpu": gpu.name if gpu else None,
                     "evidence": self.vram.evidence.line() if self.vram else None},
            "heartbeat": {**hb.to_json(), "state": self.beat_word, "measured": hb.beat.value},
            "evaluator": {"state": e.verdict.state.value, "summary": e.verdict.summary, "phase": e.phase,
                          "pid": e.pid, "attempt": harness.attempt if harness else None,
                          "max_attempts": self.side.evaluator.max_attempts,
                          "chain": [{"pid": m.proc.pid, "role": m.role} for m in e.chain.members],
                          "progress": list(e.checkpoint.progress) if e.checkpoint.progress else None,
                          "progress_error": e.checkpoint.error,
                          "ds": None if e.ds is None else round(e.ds, 3),
                          "last_status": e.last_status,
                          "harness": harness.status if harness else None,
                          # The TM port it really listens on: Bench2Drive drifts to the next free one.
                          "tm": {"planned": self.side.evaluator.tm_port,
                                 "listening": (sorted(e.listening) if isinstance(e.listening, frozenset)
                                               else None),
                                 "error": e.listening if isinstance(e.listening, str) else None,
                                 "drift": e.tm_drift(self.side.evaluator.tm_port)}},
            "idle": self.idle,
            "eta_s": live["eta_s"] if live else None,
            "eta_routes": live["eta_routes"] if live else None,   # done routes the ETA rests on
            "results": live,
            # --debug >= 1 opted in by evaluator.debug_run: its scores are not the benchmark's (issue 21).
            "debug_run": self.side.debug_level >= 1 and self.side.evaluator.debug_run,
            "busy": self.busy,
            "clients": {"count": self.clients,
                        "evidence": self.clients_evidence.line() if self.clients_evidence else None},
            "supervisor": supervisor_json(e),
        }


def supervisor_json(e: EvaluatorProbe) -> dict:
    """What the side's supervisor (the harness) is doing, from its state file and its process: a harness
    killed (-9) reads `dead`, one stopped by SIGSTOP `frozen` (its state file alone would say `watching`)."""
    h = e.harness
    if h is None:
        return {"state": "none", "recoveries": 0, "retired": [], "server_restarts_last_hour": 0}
    proc = e.chain.harness
    if proc is not None and proc.state == "T":
        state = "frozen"
    elif proc is None and h.status not in FINAL_STATUSES:
        state = "dead"
    else:
        state = h.supervisor
    now = time.time()
    return {"state": state, "status": h.status, "detail": h.detail, "pid": h.pid, "recoveries": h.recoveries,
            "route_recoveries": dict(h.route_recoveries), "route_failures": dict(h.route_failures),
            "server_restarts_last_hour": sum(1 for t in h.server_restarts if now - t < 3600),
            "retired": list(h.retired), "attempt": h.attempt, "max_attempts": h.max_attempts,
            "unsaved": h.unsaved}


T = TypeVar("T")


async def _shared(running: dict[str, asyncio.Task[T]], key: str, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The work under way for key, or new work: concurrent callers share one. shield: a caller that times
    out (one side's poll) does not cancel the work the other callers are waiting on."""
    task = running.get(key)
    if task is None:
        task = running[key] = asyncio.ensure_future(start())

        def done(t: asyncio.Task[T]) -> None:
            if running.get(key) is t:
                del running[key]
            if not t.cancelled():
                t.exception()   # retrieved even when every caller has gone
        task.add_done_callback(done)
    return await asyncio.shield(task)


def display_within_s(poll_s: float) -> float:
    """How old a measurement a display's beat may take: one and a half poll periods. The agents then push
    once a period (remote_agent.PUSH_SHARE) and a beat finds a push with half a period to spare for its
    jitter; at two thirds of a period, as before, a rig of tens of sides spent a quarter of the console's
    idle CPU taking pushes in. A display's ages are then at most 1.5 periods behind."""
    return max(0.0, poll_s) * 1.5


# How long a served side's display beats may show its server's accepted port check again (PortSeen): a
# display figure; plans, checks and `g` connect each time.
PORT_SERVED_S = 60.0


class Prober:
    """Owns the caches a rig's probes share (process scans, checkpoints, last RPC answers)."""

    def __init__(self, rig: RigConfig, hosts: dict[str, Host], rpc_every_s: float = 30.0,
                 vram_every_s: float = 5.0, rpc_overhead_s: float = 20.0, rpc_max_s: float | None = None,
                 vram_max_s: float | None = None) -> None:
        self.rig = rig
        self.hosts = hosts
        self.rpc_every_s = rpc_every_s
        # nvidia-smi costs ~50-300 ms a call and VRAM moves slowly: read it every few seconds, not every poll.
        self.vram_every_s = vram_every_s
        # Adaptive cadence: while nothing changes, the intervals double up to these; any change (another
        # server process, a failed or different RPC answer, a VRAM figure that moved) puts them back to the
        # base at once. The costly probes are subprocesses (a conda start and `import carla`; nvidia-smi):
        # on a quiet rig they were most of the console's idle CPU. Tri-state is untouched: between RPC
        # probes a server whose process and port stay up shows the last answer with its age, as before, and
        # `g` and every plan still probe at once.
        self.rpc_max_s = rpc_every_s * 4 if rpc_max_s is None else max(rpc_max_s, rpc_every_s)
        self.vram_max_s = vram_every_s * 12 if vram_max_s is None else max(vram_max_s, vram_every_s)
        self._rpc_every: dict[str, float] = {}                         # side -> its current interval
        # A side whose evaluator was running with a FRESH heartbeat at the last poll is being served: the
        # evaluator ticks its server every frame, and a server that stopped answering would stall the log.
        # Its RPC probe then only confirms what the heartbeat shows, so it runs at the long cadence at once.
        self.rpc_served_s = max(rpc_every_s * 10, self.rpc_max_s)
        self._served: dict[str, bool] = {}                            # side -> running and FRESH last poll
        # A served side's display beats show its server's accepted port check again for this long (PortSeen).
        self.port_served_s = PORT_SERVED_S
        self._ports: dict[str, PortSeen] = {}                           # side -> its last connect that accepted
        self._full: dict[str, tuple[float, SideSnapshot]] = {}          # side -> (monotonic, its last full poll)
        self._last: dict[str, SideSnapshot] = {}                        # side -> its last snapshot, full or light
        self._vram_every: dict[str, float] = {}                        # host -> its current interval
        self._sides_on_rig: RigConfig | None = None
        self._sides_by_host: dict[str, list[str]] = {}
        self.rpc_overhead_s = rpc_overhead_s   # conda start-up + `import carla`, on top of the RPC timeout
        self.checkpoints = CheckpointCache()
        self.harness_states = StateCache()
        self.live_results = LiveResultsCache()
        self._last_rpc: dict[str, tuple[float, ServerProbe]] = {}
        self._silence: dict[str, Silence] = {}      # side -> consecutive unanswered rpc probes (HUNG)
        self._last_vram: dict[str, tuple[float, VramReading]] = {}
        self._vram_reads: dict[str, asyncio.Task[VramReading]] = {}   # host -> the read under way
        self._watch_by_side: dict[tuple[str, str, str], set[int]] = {}
        self._adapter_records: dict[str, tuple[tuple, dict | None]] = {}
        self._scans: dict[str, asyncio.Task[ProcTable]] = {}           # host -> its scan under way
        self._recent: dict[str, tuple[float, ProcTable]] = {}           # host -> (monotonic end, table)

    async def tables(self, host_names: set[str], timeout: float, share: bool = False) -> dict[str, ProcTable]:
        """The process table of each host. share: the sides of one beat (cadence polls, never a plan or
        a verification) use one scan per host: the one under way, or one made in the same beat."""
        names = sorted(host_names)
        if len(names) == 1:   # a side on one host: no task for gather to make
            return {names[0]: await self._table(names[0], timeout, share)}
        results = await asyncio.gather(*(self._table(n, timeout, share) for n in names))
        return dict(zip(names, results))

    async def _table(self, host: str, timeout: float, share: bool) -> ProcTable:
        if not share:
            return await self._scan(host, timeout)
        recent = self._recent.get(host)
        if recent is not None and self._same_beat(recent[0], time.monotonic()):
            return recent[1]
        if self.hosts[host].is_local:   # scanned inline without a pause: no other side can be midway
            return await self._scan(host, timeout, self.beat_within_s)
        return await _shared(self._scans, host, lambda: self._scan(host, timeout, self.beat_within_s))

    @property
    def beat_within_s(self) -> float:
        """How old a measurement a display's beat may take (one a remote agent pushed). Plans, checks and
        commands pass 0 everywhere: they measure now."""
        return display_within_s(self.rig.poll_s)

    def _same_beat(self, at: float, now: float) -> bool:
        """A table made at `at` serves a poll starting at `now` of the same beat: the app wakes every side's
        poll on whole periods of poll_s on the monotonic clock, so polls in one period are one beat. With
        tens of sides on a loaded machine the polls of a beat start seconds apart (each runs to its first
        pause before the next one starts), far past BEAT_SHARE_S: 32 sides on 4 hosts at load 16-36 took
        10 scans a beat (5 on one host) with BEAT_SHARE_S alone."""
        if 0 <= now - at < BEAT_SHARE_S:
            return True
        p = self.rig.poll_s
        return p > 0 and 0 <= now - at < p and int(now // p) == int(at // p)

    async def _scan(self, host: str, timeout: float, within_s: float = 0.0) -> ProcTable:
        # The processes the last snapshot cared about are re-read, not served from the scan cache: a chain
        # member that exited and became a zombie must show as one now, not at its next cache miss.
        # Gathered here, once a scan, not on every snapshot: a beat of tens of sides remembers tens of them.
        watched = frozenset(pid for (h, _side, _role), pids in self._watch_by_side.items() if h == host for pid in pids)
        table = await process_table(self.hosts[host], timeout, fresh_pids=watched, within_s=within_s)
        self._recent[host] = (time.monotonic(), table)
        return table

    def _remember(self, snap: SideSnapshot) -> None:
        side = snap.side
        self._served[snap.name] = (snap.evaluator.verdict.state is State.ALIVE and snap.heartbeat.beat is Beat.FRESH
                                   and snap.server.verdict.state is State.ALIVE)
        self._watch_by_side[(side.server.host, snap.name, "server")] = {p.pid for p in snap.server.procs}
        self._watch_by_side[(side.evaluator.host, snap.name, "chain")] = set(snap.evaluator.chain.pids)

    async def side(self, name: str, *, rpc: bool | None = None, tables: dict[str, ProcTable] | None = None,
                   tail: int = 0, vram: bool = True, light_within_s: float = 0.0,
                   beat_due: bool = True) -> SideSnapshot:
        """rpc: True forces the carla-client probe, False skips it, None follows the cadence. vram=False:
        no GPU read (the supervisor's watch: it needs none, and nvidia-smi would be a child of its chain).
        light_within_s: a cadence poll of a served side whose last full poll is younger than this reads
        only its heartbeat and log tail (a display's beat; see _light). Plans and checks never pass it.
        beat_due=False (with light_within_s): such a poll reads nothing and returns the side's last
        snapshot itself, unchanged (a rig of tens of sides reads a served side's heartbeat every few beats)."""
        if light_within_s > 0 and rpc is None and tables is None and self._served.get(name):
            full = self._full.get(name)
            if full is not None and time.monotonic() - full[0] < light_within_s:
                shown = self._last.get(name)
                if not beat_due and shown is not None:
                    return shown
                snap = self._last[name] = await self._light(full[1], tail)
                return snap
        t0 = time.perf_counter()
        side = self.rig.sides[name]
        timeout = side.server.probe_timeout_s
        ev_host = self.hosts[side.evaluator.host]
        local = self.hosts[side.server.host].is_local and ev_host.is_local
        log = side.evaluator.path(side.evaluator.log)
        early: list[asyncio.Future] = []
        within = self.beat_within_s if rpc is None and tables is None else 0.0
        if not local:
            # On another host every read is a round trip: the heartbeat, the checkpoint and the harness state
            # do not depend on the process table, so they go out with it, not after it (a remote full poll
            # was three round trips in a row: 7-11 ms, measured on the sim's ssh hosts).
            early = [asyncio.ensure_future(probe_heartbeat(ev_host, log, side.heartbeat.stall_s, timeout, within)),
                     asyncio.ensure_future(evaluator_files(self.rig, side, ev_host, self.checkpoints, timeout,
                                                           self.harness_states, within))]
        try:
            if tables is None:
                tables = await self.tables({side.server.host, side.evaluator.host}, timeout, share=rpc is None)
        except BaseException:
            for f in early:
                f.cancel()
            raise
        last = self._last_rpc.get(name)
        due = rpc if rpc is not None else (last is None or time.time() - last[0] >= self.rpc_interval(name))
        seen = self._port_seen(name, within, bool(due))
        server_c = probe_server(self.rig, side, self.hosts, with_rpc=due, table=tables[side.server.host],
                                rpc_overhead_s=self.rpc_overhead_s, port_seen=seen)
        hb_c = early[0] if early else probe_heartbeat(ev_host, log, side.heartbeat.stall_s, timeout, within)
        files = early[1] if early else evaluator_files(self.rig, side, ev_host, self.checkpoints, timeout,
                                                       self.harness_states, within)
        ev_c = probe_evaluator(self.rig, side, ev_host, tables[side.evaluator.host], self.checkpoints, timeout,
                               self.harness_states, files=files)
        vram_c = self._vram(side.server.host, timeout, force=bool(rpc)) if vram else self._no_vram(side.server.host)
        if (not due and (not vram or self._vram_cached(side.server.host, force=bool(rpc))) and local):
            # All local, no RPC and no VRAM read due: each probe is a fraction of a millisecond, less
            # than the tasks gather would make for them. Remote or slow probes still run side by side.
            server, hb, ev, vram_read = await server_c, await hb_c, await ev_c, await vram_c
        else:
            server, hb, ev, vram_read = await asyncio.gather(server_c, hb_c, ev_c, vram_c)
        self._keep_connect(name, server, seen)
        server = self._carry_rpc(name, server, due)
        server = self._hung(name, server, due)
        lines: tuple[str, ...] = ()
        if tail:
            got = await tail_lines(ev_host, side.evaluator.path(side.evaluator.log), tail, timeout)
            lines = tuple(got or ())
        # Recomputed only when the checkpoint changed (once a route): no I/O on an ordinary poll.
        retired = tuple(str(r) for r in (getattr(ev.harness, "retired", None) or ()))
        results = await self.live_results.get(ev_host, side, ev.checkpoint.checkpoint, ev.checkpoint.missing, timeout,
                                              retired, within)
        clients: int | None = 0
        cev: Evidence | None = None
        if server.verdict.state is State.ALIVE and ev.verdict.state is State.DEAD:
            # Looks empty: a client that is not in the chain (a hand-started evaluator without the side's
            # TM port) still makes it busy. Only then is the kernel asked, so a running side pays nothing.
            clients, cev = await lasting_clients(self.hosts[side.server.host], side.server.rpc_port, timeout)
        snap = SideSnapshot(name, side, server, vram_read, hb, ev, lines, took_ms=(time.perf_counter() - t0) * 1e3,
                            adapter_record=self._adapter_record(name, server), results=results,
                            clients=clients, clients_evidence=cev)
        self._remember(snap)
        self._full[name] = (time.monotonic(), snap)
        self._last[name] = snap
        return snap

    def _port_seen(self, name: str, within: float, rpc_due: bool) -> PortSeen | None:
        """The accepted connect a display's beat of a served side may show again (PortSeen); None: connect.
        Never for a plan's or a check's poll (within 0), an RPC probe's, or a side that is not served."""
        seen = self._ports.get(name)
        if seen is None or within <= 0 or rpc_due or not self._served.get(name):
            return None
        return seen if 0 <= time.time() - seen.at < self.port_served_s else None

    def _keep_connect(self, name: str, server: ServerProbe, shown: PortSeen | None) -> None:
        """Keep a connect that accepted (not one shown again: its age runs from the connect)."""
        if shown is not None and (server.pid, server.create_time) == (shown.pid, shown.create_time):
            return
        if server.tcp is not None and server.tcp.open is True and server.pid is not None and server.create_time is not None:
            self._ports[name] = PortSeen(server.pid, server.create_time, server.tcp, time.time())
        else:
            self._ports.pop(name, None)

    async def _light(self, full: SideSnapshot, tail: int) -> SideSnapshot:
        """A served side between its full polls: the heartbeat and the log tail read now, the rest (process
        table, chain, server, checkpoint, VRAM) as the full poll of at most light_within_s ago saw it. A
        running side's processes move slowly, and its heartbeat is what shows a stop first: a beat that is
        not FRESH ends the side's served state, so the next poll is a full one."""
        t0 = time.perf_counter()
        side = full.side
        ev_host = self.hosts[side.evaluator.host]
        timeout = side.server.probe_timeout_s
        log = side.evaluator.path(side.evaluator.log)
        hb = await probe_heartbeat(ev_host, log, side.heartbeat.stall_s, timeout, self.beat_within_s)
        lines = full.log_tail
        if tail:
            lines = tuple(await tail_lines(ev_host, log, tail, timeout) or ())
        if hb.beat is not Beat.FRESH:
            self._served[full.name] = False
        return dataclasses.replace(full, heartbeat=hb, log_tail=lines, at=time.time(),
                                   took_ms=(time.perf_counter() - t0) * 1e3)

    def served(self, side: str) -> bool:
        """The side was being served at its last poll: evaluator running, heartbeat FRESH, server ALIVE."""
        return bool(self._served.get(side))

    def rpc_interval(self, side: str) -> float:
        """Seconds between cadence RPC probes of a side now (a forced probe ignores it)."""
        every = self._rpc_every.get(side, self.rpc_every_s)
        return max(every, self.rpc_served_s) if self._served.get(side) else every

    def _adapter_record(self, name: str, server: ServerProbe) -> dict | None:
        """adapter.json changes only when polling accepts a new server: read it again when the server's
        (pid, create time) moves, not every poll."""
        key = (server.pid, server.create_time)
        cached = self._adapter_records.get(name)
        if cached is None or cached[0] != key:
            cached = self._adapter_records[name] = (key, read_record(self.rig, name))
        return cached[1]

    async def _no_vram(self, host: str) -> VramReading | None:
        last = self._last_vram.get(host)
        return last[1] if last is not None else None

    def _vram_cached(self, host: str, force: bool) -> bool:
        last = self._last_vram.get(host)
        return not force and last is not None and time.time() - last[0] < self.vram_interval(host)

    def vram_interval(self, host: str) -> float:
        """Seconds between cadence VRAM reads of a GPU host now. While every side rendering on it is being
        served (evaluator running, heartbeat FRESH, server ALIVE), its memory is the running servers' and
        moves little: the longest interval at once, not the doubling from the shortest (a read is an
        nvidia-smi start on every host without NVML). A forced read (a plan, `g`, a launch's gate) ignores it."""
        every = self._vram_every.get(host, self.vram_every_s)
        sides = self._sides_on(host)
        if sides and all(self._served.get(n) for n in sides):
            return max(every, self.vram_max_s)
        return every

    def _sides_on(self, host: str) -> list[str]:
        """The sides whose server runs on host (asked by every side's poll: built once a rig, not each time)."""
        if self._sides_on_rig is not self.rig:
            self._sides_on_rig, self._sides_by_host = self.rig, {}
            for n, sc in self.rig.sides.items():
                self._sides_by_host.setdefault(sc.server.host, []).append(n)
        return self._sides_by_host.get(host, [])

    async def _vram(self, host: str, timeout: float, force: bool) -> VramReading:
        if self._vram_cached(host, force):
            return self._last_vram[host][1]
        # Sides sharing a GPU host poll on the same beat: one nvidia-smi (or NVML) read serves them all.
        return await _shared(self._vram_reads, host, lambda: self._read_vram(host, timeout))

    async def gpu_reading(self, host: str, timeout: float, fresh: bool = False) -> VramReading:
        """The host's GPU reading for the resource guards: the VRAM pane's own, on its cadence (one
        nvidia-smi for both), or a new one (fresh: a decision such as a launch's gate)."""
        return await self._vram(host, timeout, force=fresh)

    async def _read_vram(self, host: str, timeout: float) -> VramReading:
        reading = await read_vram(self.rig.hosts[host], self.hosts[host], timeout)
        last = self._last_vram.get(host)
        same = (last is not None and reading.ok and last[1].ok and reading.gpus == last[1].gpus
                and reading.apps == last[1].apps)
        every = self._vram_every.get(host, self.vram_every_s)
        self._vram_every[host] = min(every * 2, self.vram_max_s) if same else self.vram_every_s
        self._last_vram[host] = (time.time(), reading)
        return reading

    def _carry_rpc(self, name: str, server: ServerProbe, probed: bool) -> ServerProbe:
        if probed:
            last = self._last_rpc.get(name)
            if server.version:
                same = (last is not None and last[1].version == server.version and last[1].pid == server.pid
                        and last[1].create_time == server.create_time)
                every = self._rpc_every.get(name, self.rpc_every_s)
                self._rpc_every[name] = min(every * 2, self.rpc_max_s) if same else self.rpc_every_s
                self._last_rpc[name] = (time.time(), server)
            else:
                self._rpc_every[name] = self.rpc_every_s
                self._last_rpc.pop(name, None)
            return server
        last = self._last_rpc.get(name)
        if last is None or server.pid != last[1].pid or server.create_time != last[1].create_time:
            self._rpc_every[name] = self.rpc_every_s   # another server (or none): back to the base cadence
        summary = server.verdict.summary
        if (last is not None and server.pid == last[1].pid and server.create_time == last[1].create_time
                and server.verdict.state is State.UNKNOWN and summary.startswith("process and port up")):
            age = time.time() - last[0]
            ev = server.verdict.evidence + (Evidence("last rpc answer", True,
                                                     detail=f"rpc {last[1].version} {age:.0f} s ago"),)
            verdict = Verdict(State.ALIVE, ev, f"rpc {last[1].version} ({age:.0f} s ago)")
            return replace(server, verdict=verdict, version=last[1].version, rpc_at=last[0])
        return server

    def _hung(self, name: str, server: ServerProbe, probed: bool) -> ServerProbe:
        silence = track_silence(self._silence.get(name), server, probed, time.time())
        if silence is None:
            self._silence.pop(name, None)
            return server
        self._silence[name] = silence
        cfg = self.rig.sides[name].server
        return hung_verdict(server, silence, cfg.hung_probes, cfg.hung_after_s)

    def silence(self, name: str) -> Silence | None:
        return self._silence.get(name)

    async def all(self, *, rpc: bool | None = None, tail: int = 0) -> dict[str, SideSnapshot]:
        hosts = {h for s in self.rig.sides.values() for h in (s.server.host, s.evaluator.host)}
        timeout = max(s.server.probe_timeout_s for s in self.rig.sides.values())
        tables = await self.tables(hosts, timeout)
        snaps = await asyncio.gather(*(self.side(n, rpc=rpc, tables=tables, tail=tail) for n in self.rig.sides))
        return dict(zip(self.rig.sides, snaps))

