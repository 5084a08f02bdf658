"""Adapter polling: find the `-graphicsadapter=K` that really renders, by launching and measuring.

Why: `-graphicsadapter=2` picked the RTX one day and the Basic Render Driver the next (crash 0x18), and
with two servers on one GPU the absolute VRAM level says nothing. So for each candidate, in order:
baseline VRAM of every GPU → launch `[*command, -carla-rpc-port=N, -graphicsadapter=K]` detached,
recording pid + start time → watch it for start_wait_s → accept only if it still runs and some GPU's used
VRAM rose by ≥ vram_min_delta_mb over that baseline; otherwise stop exactly that launch (the launcher and
every process it started, outer → inner, through the guard) and try the next.

Fail-closed: a VRAM reading that is UNKNOWN (no driver, `[N/A]`, a hang) stops the polling and stops the
launch it made; nothing is ever accepted on a guess. The whole polling is one guard operation
(Op.ADAPTER_POLL: server DEAD, ports CLEAR, vram READ); each undo is another (Op.STOP_OWN_LAUNCH).

Which processes are "ours": the launcher by its (pid, start time), its descendants, and any process with
the side's exact `-carla-rpc-port=N` token that was not in the table just before the launch (the real
server may be re-parented when a launcher exits). Clock-independent: a Windows host's clock need not
agree with ours.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Plan, Target, make_plan
from ops.model import RigConfig, SideConfig
from ops.platform import atomic
from ops.platform.base import Host
from ops.platform.common import SpawnError
from ops.platform.procs import Proc, ProcTable
from ops.platform.verbs import process_table, tcp_check
from ops.probes.adapter_record import record_path
from ops.probes.ports import scan_ports
from ops.probes.server import probe_server, rpc_marker, server_processes
from ops.probes.vram import VramReading, read_vram
from ops.rig import LiveRig

ACCEPTED = "accepted"
NO_RISE = "no-vram-rise"
CRASHED = "crashed"
VRAM_UNKNOWN = "vram-unknown"
SPAWN_FAILED = "spawn-failed"
PORT_BUSY = "port-busy"
STOP_FAILED = "stop-failed"
# Verdicts after which trying the next candidate would be a guess or would stack servers up.
STOPS_POLLING = frozenset({VRAM_UNKNOWN, SPAWN_FAILED, PORT_BUSY, STOP_FAILED})
WATCH_EVERY_S = 0.25


EventKind = Literal["baseline", "launched", "watching", "verdict", "stopped", "done"]


@dataclass(frozen=True)
class AdapterEvent:
    kind: EventKind
    adapter: int | None
    detail: str


EventSink = Callable[[AdapterEvent], "None | Awaitable[None]"]


@dataclass(frozen=True)
class Try:
    adapter: int
    verdict: str
    baseline: dict[int, int | None] = field(default_factory=dict)   # gpu index → used MiB
    after: dict[int, int | None] | None = None
    delta_mb: int | None = None       # the largest rise over any GPU
    gpu: int | None = None            # the GPU of that rise
    gpu_name: str | None = None
    pid: int | None = None            # what spawn returned (the launcher, usually)
    create_time: float | None = None
    server_pid: int | None = None     # the innermost process with the port marker
    argv: tuple[str, ...] = ()
    stopped: str | None = None        # how the launch was undone (guard outcome detail)
    detail: str = ""

    def to_json(self) -> dict:
        return {"adapter": self.adapter, "verdict": self.verdict,
                "baseline_mb": {str(k): v for k, v in self.baseline.items()},
                "after_mb": None if self.after is None else {str(k): v for k, v in self.after.items()},
                "delta_mb": self.delta_mb, "gpu": self.gpu, "gpu_name": self.gpu_name, "pid": self.pid,
                "create_time": self.create_time, "server_pid": self.server_pid, "argv": list(self.argv),
                "stopped": self.stopped, "detail": self.detail}


@dataclass(frozen=True)
class AdapterReport:
    side: str
    plan: Plan
    tries: tuple[Try, ...] = ()
    refused: str | None = None        # the plan or the confirmation refused: nothing was launched
    stopped_on: str | None = None     # the verdict that stopped the polling early (UNKNOWN VRAM, ...)
    record: str | None = None         # path of the adapter.json written on success

    @property
    def accepted(self) -> Try | None:
        return next((t for t in self.tries if t.verdict == ACCEPTED), None)

    @property
    def exit_code(self) -> int:
        if self.accepted is not None:
            return 0
        if self.refused is not None or self.stopped_on in (VRAM_UNKNOWN, PORT_BUSY):
            return 3   # fail-closed: something could not be measured, or a precondition failed
        return 1       # every candidate tried, none renders (or a launch could not be made/undone)

    def to_json(self) -> dict:
        acc = self.accepted
        return {"side": self.side, "accepted": None if acc is None else {"adapter": acc.adapter, "gpu": acc.gpu,
                                                                        "gpu_name": acc.gpu_name,
                                                                        "delta_mb": acc.delta_mb,
                                                                        "pid": acc.server_pid},
                "tries": [t.to_json() for t in self.tries], "refused": self.refused,
                "stopped_on": self.stopped_on, "record": self.record, "plan": self.plan.to_json()}


# ------------------------------------------------------------------------------------------ records

def _write_record(rig: RigConfig, side: str, data: dict) -> Path:
    return atomic.write_json(record_path(rig, side), data)   # status and the TUI never see half a file


# ------------------------------------------------------------------------------------------ helpers

def launch_argv(side: SideConfig, adapter: int) -> list[str]:
    return [*side.server.command, rpc_marker(side.server.rpc_port), f"-graphicsadapter={int(adapter)}"]


def vram_word(v: VramReading) -> str:
    """READ only when every GPU's used VRAM is a number: a delta against `[N/A]` would be a guess."""
    return "READ" if v.ok and v.gpus and all(g.used_mb is not None for g in v.gpus) else "UNKNOWN"


def _used(v: VramReading) -> dict[int, int | None]:
    return {g.index: g.used_mb for g in v.gpus}


def _vram_why(v: VramReading) -> str:
    if not v.ok:
        return v.evidence.line()
    unread = [g.index for g in v.gpus if g.used_mb is None]
    return f"{v.evidence.what}: used VRAM unreadable on gpu {unread}" if unread else f"{v.evidence.what}: no GPU"


def _depth(table: ProcTable, p: Proc) -> int:
    return len(table.ancestors(p.pid))


def ours(table: ProcTable, pid: int, create_time: float | None, port: int,
         before: frozenset[tuple[int, float]], command: tuple[str, ...] | None = None) -> list[Proc]:
    """Live processes of this launch, outer → inner (see the module docstring)."""
    found: dict[int, Proc] = {}
    launcher = table.procs.get(pid)
    if launcher is not None and create_time is not None and abs(launcher.create_time - create_time) <= 0.05:
        found[pid] = launcher
        for d in table.descendants(pid):
            found[d.pid] = d
    for p in server_processes(table, port, command):
        if p.key not in before:
            found[p.pid] = p
    live = [p for p in found.values() if p.state != "Z"]   # a zombie has exited already
    return sorted(live, key=lambda p: (_depth(table, p), p.create_time, p.pid))


# ------------------------------------------------------------------------------------------ the plan

async def plan_adapter_poll(live: LiveRig, side: str) -> Plan:
    rig: RigConfig = live.config
    sc = rig.sides[side]
    host = live.hosts[sc.server.host]
    timeout = sc.server.probe_timeout_s
    server, scan, vram = await asyncio.gather(
        probe_server(rig, sc, live.hosts, with_rpc=True),
        scan_ports(live),
        read_vram(rig.hosts[sc.server.host], host, timeout))
    verdicts = {"server": server.verdict.state.value, "ports": scan.verdict(side), "vram": vram_word(vram)}
    evidence = (f"server {server.verdict.state.value}: {server.verdict.summary}",
                *(e.line() for e in server.verdict.evidence),
                *scan.evidence_lines(side), vram.evidence.line())
    cands = sc.server.adapter_candidates
    precondition = None
    if not cands:
        precondition = "no adapter_candidates configured"
    cmd = " ".join([*sc.server.command, rpc_marker(sc.server.rpc_port)])
    action = (f"on {host.name}: for K in {list(cands)}: launch {cmd} -graphicsadapter=K "
              f"detached, wait {sc.server.start_wait_s:g} s, accept on a VRAM rise ≥ {sc.server.vram_min_delta_mb} "
              "MiB on any GPU, else stop that launch (exact pids) and try the next")
    return make_plan(Op.ADAPTER_POLL, side, host.name, (), verdicts, evidence, action, precondition)


# ------------------------------------------------------------------------------------------ polling

class _Poller:
    def __init__(self, live: LiveRig, side: str, conf: Confirmation, on_event: EventSink | None) -> None:
        self.live = live
        self.rig: RigConfig = live.config
        self.side = side
        self.sc = self.rig.sides[side]
        self.host: Host = live.hosts[self.sc.server.host]
        self.cfg = self.rig.hosts[self.sc.server.host]
        self.timeout = self.sc.server.probe_timeout_s
        self.audit = Audit(self.rig.state_dir)
        self.guard = Guard(live.hosts, self.audit)
        self.conf = conf
        self.on_event = on_event
        self.tries: list[Try] = []
        self.stopped_on: str | None = None
        self.record: str | None = None

    async def emit(self, kind: EventKind, adapter: int | None, detail: str) -> None:
        if self.on_event is None:
            return
        r = self.on_event(AdapterEvent(kind, adapter, detail))
        if inspect.isawaitable(r):
            await r

    async def run(self, _plan: Plan) -> tuple[bool, str]:
        for k in self.sc.server.adapter_candidates:
            t = await self.try_one(k)
            self.tries.append(t)
            self.audit.write({"side": self.side, "host": self.host.name, "operation": "adapter-try",
                              "outcome": t.verdict, "detail": t.detail, "adapter": k, "try": t.to_json(),
                              "targets": [] if t.pid is None else [{"pid": t.pid, "create_time": t.create_time,
                                                                    "cmdline": list(t.argv)}]})
            await self.emit("verdict", k, f"{t.verdict}: {t.detail}")
            if t.verdict == ACCEPTED:
                self.record = str(self.save(t))
                # The polling's audit result is its one event-log line: it names the tries before it too.
                before = ", ".join(f"{x.adapter} {x.verdict}" for x in self.tries[:-1])
                return True, f"adapter {k} accepted: {t.detail}" + (f" (tried before: {before})" if before else "")
            if t.verdict in STOPS_POLLING:
                self.stopped_on = t.verdict
                return False, f"stopped at adapter {k}: {t.verdict}: {t.detail}"
        return False, f"no candidate of {list(self.sc.server.adapter_candidates)} rendered"

    def save(self, t: Try) -> Path:
        return _write_record(self.rig, self.side, {
            "side": self.side, "host": self.host.name, "adapter": t.adapter, "gpu": t.gpu, "gpu_name": t.gpu_name,
            "delta_mb": t.delta_mb, "baseline_mb": {str(k): v for k, v in t.baseline.items()},
            "after_mb": {str(k): v for k, v in (t.after or {}).items()}, "pid": t.pid,
            "create_time": t.create_time, "server_pid": t.server_pid, "rpc_port": self.sc.server.rpc_port,
            "at": time.time()})

    async def try_one(self, k: int) -> Try:
        port = self.sc.server.rpc_port
        base = await read_vram(self.cfg, self.host, self.timeout)
        if vram_word(base) != "READ":
            return Try(k, VRAM_UNKNOWN, _used(base), detail=f"baseline: {_vram_why(base)}")
        baseline = _used(base)
        await self.emit("baseline", k, ", ".join(f"gpu{i} {mb} MiB" for i, mb in baseline.items()))
        tcp = await tcp_check(self.host.tcp_address, port, self.timeout)
        before = await process_table(self.host, self.timeout)
        if tcp.open is not False or not before.ok:
            why = tcp.evidence.line() if tcp.open is not False else before.error
            return Try(k, PORT_BUSY, baseline, detail=f"before the launch: {why}")
        before_keys = frozenset(p.key for p in server_processes(before, port, self.sc.server.command))
        argv = tuple(launch_argv(self.sc, k))
        log = None
        if self.host.is_local:
            log_dir = Path(self.rig.state_dir) / "sides" / self.side
            log_dir.mkdir(parents=True, exist_ok=True)
            log = str(log_dir / "server.log")
        try:
            pid = await self.host.spawn_detached(argv, log_path=log)
        except SpawnError as e:
            return Try(k, SPAWN_FAILED, baseline, argv=argv, detail=str(e))
        first = await process_table(self.host, self.timeout, fresh_pids=frozenset([pid]))
        launched = first.procs.get(pid) if first.ok else None
        ct = launched.create_time if launched is not None else None
        self.audit.write({"side": self.side, "host": self.host.name, "operation": "adapter-launch",
                          "outcome": "launched", "adapter": k, "action": " ".join(argv),
                          "targets": [{"pid": pid, "create_time": ct, "cmdline": list(argv)}]})
        await self.emit("launched", k, f"pid {pid}: {' '.join(argv)}")
        try:
            return await self.judge(k, baseline, argv, pid, ct, before_keys)
        except BaseException:
            # Cancelled mid-wait (Ctrl-C, the TUI closing): never leave our launch running.
            await asyncio.shield(self.undo(k, pid, ct, before_keys, "polling cancelled"))
            raise

    async def judge(self, k: int, baseline: dict[int, int | None], argv: tuple[str, ...], pid: int,
                    ct: float | None, before: frozenset[tuple[int, float]]) -> Try:
        port = self.sc.server.rpc_port
        deadline = time.monotonic() + self.sc.server.start_wait_s
        await self.emit("watching", k, f"{self.sc.server.start_wait_s:g} s")
        mine: list[Proc] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(WATCH_EVERY_S, left))
            table = await process_table(self.host, self.timeout, fresh_pids=frozenset([pid]))
            if table.ok:
                mine = ours(table, pid, ct, port, before, self.sc.server.command)
                if not mine:
                    break   # it died: no need to wait out the rest
        after_v = await read_vram(self.cfg, self.host, self.timeout)
        table = await process_table(self.host, self.timeout, fresh_pids=frozenset([pid]))
        mine = ours(table, pid, ct, port, before, self.sc.server.command) if table.ok else mine
        inner = mine[-1].pid if mine else None
        common: dict[str, Any] = dict(baseline=baseline, pid=pid, create_time=ct, server_pid=inner, argv=argv)
        if table.ok and not mine:
            seen = _used(after_v) if vram_word(after_v) == "READ" else None
            return Try(k, CRASHED, after=seen, **common, detail=f"the launch (pid {pid}) exited within "
                       f"{self.sc.server.start_wait_s:g} s: nothing left to stop")
        if vram_word(after_v) != "READ":
            stopped = await self.undo(k, pid, ct, before, "VRAM unreadable after the launch")
            verdict = VRAM_UNKNOWN if stopped[0] else STOP_FAILED
            return Try(k, verdict, after=_used(after_v) or None, stopped=stopped[1], **common,
                       detail=f"after: {_vram_why(after_v)}")
        after = _used(after_v)
        rises = {i: a - b for i, a in after.items() if a is not None and (b := baseline.get(i)) is not None}
        gpu = max(rises, key=lambda i: rises[i]) if rises else None
        delta = rises[gpu] if gpu is not None else None
        risen = after_v.gpu(gpu) if gpu is not None else None
        name = risen.name if risen else None
        common.update(after=after, delta_mb=delta, gpu=gpu, gpu_name=name)
        need = self.sc.server.vram_min_delta_mb
        if table.ok and delta is not None and delta >= need:
            return Try(k, ACCEPTED, **common, detail=f"+{delta} MiB ≥ {need} MiB, server pid {inner}")
        stopped = await self.undo(k, pid, ct, before, f"VRAM rose {delta} MiB < {need} MiB")
        return Try(k, NO_RISE if stopped[0] else STOP_FAILED, stopped=stopped[1], **common,
                   detail=f"largest rise {delta} MiB (gpu{gpu}) < {need} MiB"
                   + ("" if table.ok else f"; process table: {table.error}"))

    async def undo(self, k: int, pid: int, ct: float | None, before: frozenset[tuple[int, float]],
                   why: str) -> tuple[bool, str]:
        """Stop exactly this launch through the guard; (every process of it gone, detail)."""
        port = self.sc.server.rpc_port
        table = await process_table(self.host, self.timeout, fresh_pids=frozenset([pid]))
        if not table.ok:
            return False, f"cannot read the process table to stop the launch: {table.error}"
        mine = ours(table, pid, ct, port, before, self.sc.server.command)
        if not mine:
            return True, "already gone"
        targets = [Target.of(self.host.name, p, "launcher" if p.pid == pid else
                             ("server" if p.has_token(rpc_marker(port)) else "child")) for p in mine]
        launch = "OURS" if ct is not None else "UNKNOWN"
        plan = make_plan(Op.STOP_OWN_LAUNCH, self.side, self.host.name, targets, {"launch": launch},
                         (f"adapter {k}: {why}",), action=f"stop the launch of adapter {k} (pid {pid}), outer → inner")
        conf = Confirmation(True, f"{self.conf.via}:adapter-poll", typed=self.side)
        out = await self.guard.execute(plan, conf)
        await self.emit("stopped", k, out.detail or str(out.refused))
        check = await process_table(self.host, self.timeout)
        left = ours(check, pid, ct, port, before, self.sc.server.command) if check.ok else None
        if left is None:
            return False, f"{out.detail or out.refused}; cannot verify: {check.error}"
        if left:
            return False, f"{out.detail or out.refused}; still running: {[p.pid for p in left]}"
        return out.ok, out.detail or str(out.refused)


async def poll_adapters(live: LiveRig, side: str, conf: Confirmation, on_event: EventSink | None = None,
                        plan: Plan | None = None) -> AdapterReport:
    """Plan (fresh), then poll through the guard. `plan`: the one the operator saw and confirmed; when the
    fresh plan's verdicts differ from it, the rig changed meanwhile and the polling is refused."""
    fresh = await plan_adapter_poll(live, side)
    if plan is not None and dict(plan.verdicts) != dict(fresh.verdicts) and fresh.allowed:
        fresh = make_plan(fresh.op, fresh.side, fresh.host, fresh.targets, fresh.verdicts, fresh.evidence,
                          fresh.action, precondition=f"the verdicts changed since the plan was confirmed: "
                          f"{dict(plan.verdicts)} → {dict(fresh.verdicts)}")
    poller = _Poller(live, side, conf, on_event)
    out = await poller.guard.execute(fresh, conf, action=poller.run)
    await poller.emit("done", None, out.detail or str(out.refused))
    return AdapterReport(side, fresh, tuple(poller.tries), out.refused, poller.stopped_on, poller.record)
