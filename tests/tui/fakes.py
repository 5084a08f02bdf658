"""A deterministic backend for the TUI tests: hand-built SideSnapshots, no process, no clock.

Every time shown on screen derives from the snapshot's own `at` and fixed create times, so the snapshot
tests render the same text on every machine (the TZ is pinned to UTC by the conftest).
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from console.tui.protocol import ActionResult, PortsReport, StepOutcome, Unavailable
from ops.actions.guard import Confirmation, Op, Plan, Target, make_plan
from ops.model import EvaluatorConfig, HeartbeatConfig, HostConfig, RigConfig, ServerConfig, SideConfig
from ops.parse.checkpoint import Checkpoint, RouteRecord
from ops.platform.procs import Proc
from ops.probes.chain import Chain, ChainMember
from ops.probes.evaluator import CheckpointReading, EvaluatorProbe
from ops.probes.harness_state import HarnessState
from ops.probes.heartbeat import HeartbeatProbe
from ops.probes.prober import SideSnapshot
from ops.probes.server import ServerProbe
from ops.probes.vram import Gpu, VramReading
from ops.tristate import Beat, Evidence, State, Verdict

T0 = 1_700_000_000.0          # 2023-11-14 22:13:20 UTC: the frozen "now" of every snapshot


def side_config(name: str, rpc: int, tm: int, host: str = "local") -> SideConfig:
    return SideConfig(
        name=name,
        server=ServerConfig(host=host, command=("CarlaUE4.sh", "-RenderOffScreen"), rpc_port=rpc, adapter=0),
        evaluator=EvaluatorConfig(host=host, conda_env="sim-env", cwd=f"/work/{name}", script="eval.py",
                                  routes="routes.xml", checkpoint="results/result.json", log="logs/eval.log",
                                  tm_port=tm, max_attempts=3),
        heartbeat=HeartbeatConfig(stall_s=1500.0))


def rig_config(sides: int = 2) -> RigConfig:
    names = ["A", "B", "C", "D"][:sides]
    return RigConfig(path="/etc/rig.yaml", name="demo-rig", state_dir="/nonexistent/state", conda=("conda",),
                     poll_s=1.0, hosts={"local": HostConfig("local", "local")},
                     sides={n: side_config(n, 2000 + 10 * i, 8010 + i) for i, n in enumerate(names)})


def ev(what: str, ok: bool = True, detail: str = "", error: str | None = None) -> Evidence:
    return Evidence(what, ok, detail=detail, error=error, took_ms=3.0, at=T0)


def proc(pid: int, ppid: int, cmd: tuple[str, ...], age_s: float) -> Proc:
    return Proc(pid, ppid, T0 - age_s, cmd, name=cmd[0].rsplit("/", 1)[-1], state="S")


def record(i: int, status: str = "Completed", score: float = 80.0) -> RouteRecord:
    return RouteRecord(index=i, route_id=f"RouteScenario_{i}_rep0", status=status, score_composed=score,
                       score_route=score, score_penalty=1.0)


def snapshot(cfg: SideConfig, *, server: str = "ALIVE", beat: Beat = Beat.FRESH, age_s: float | None = 2.0,
             evaluator: str = "ALIVE", phase: str = "running", done: int = 3, total: int = 10,
             attempt: int = 1, table_ok: bool = True) -> SideSnapshot:
    host = cfg.server.host
    table_ev = ev(f"process table of {host}", table_ok, "412 processes" if table_ok else "",
                  None if table_ok else "timeout after 5.0 s")
    spid = 4100 + cfg.server.rpc_port % 100
    sproc = proc(spid, 1, ("CarlaUE4-Linux-Shipping", "CarlaUE4", f"-carla-rpc-port={cfg.server.rpc_port}",
                           "-graphicsadapter=0"), 3725)
    if server == "ALIVE":
        sv = ServerProbe(Verdict(State.ALIVE, (table_ev, ev("rpc", detail="rpc 0.9.15 in 3 ms")), "rpc 0.9.15 (3 ms)"),
                         spid, sproc.create_time, 0, (sproc,), "0.9.15", T0)
    elif server == "DEAD":
        sv = ServerProbe(Verdict(State.DEAD, (table_ev,), "no process, port refused"))
    else:
        sv = ServerProbe(Verdict(State.UNKNOWN, (table_ev,), "process table unreadable: timeout after 5.0 s"))
    vram = VramReading((Gpu(0, "NVIDIA H200", 41230, 143771),), {spid: 9312} if server == "ALIVE" else {},
                       ev("nvidia-smi on local", detail="gpu0"), "nvidia-smi")
    log = cfg.evaluator.path(cfg.evaluator.log)
    hb = HeartbeatProbe(beat, age_s, log, ev(f"mtime of {log}", beat is not Beat.UNKNOWN,
                                             error=None if beat is not Beat.UNKNOWN else "timeout after 5.0 s"),
                        cfg.heartbeat.stall_s)
    base = 5000 + cfg.evaluator.tm_port % 100 * 10
    members: tuple[ChainMember, ...] = ()
    if evaluator == "ALIVE":
        members = (
            ChainMember(proc(base, 1, ("python", "-m", "console", "harness", cfg.name), 900), "harness"),
            ChainMember(proc(base + 1, base, ("conda", "run", "-n", "sim-env", "python", "eval.py"), 899), "wrapper"),
            ChainMember(proc(base + 2, base + 1, ("python", "eval.py", "--port", str(cfg.server.rpc_port),
                                                  "--traffic-manager-port", str(cfg.evaluator.tm_port)), 898),
                        "evaluator"))
    harness = HarnessState(cfg.name, base, T0 - 900, cfg.evaluator.max_attempts, status="running", attempt=attempt)
    recs = tuple(record(i, "Completed" if i % 2 == 0 else "Failed - Agent timed out", 80.0 if i % 2 == 0 else 40.0)
                 for i in range(done))
    cp = CheckpointReading(Checkpoint((done, total), recs, "Started"), None, mtime=T0 - 5)
    ev_state = {"ALIVE": State.ALIVE, "DEAD": State.DEAD}.get(evaluator, State.UNKNOWN)
    evp = EvaluatorProbe(Verdict(ev_state, (table_ev,), f"evaluator {evaluator}"), Chain(members), harness,
                         evaluator == "ALIVE", cp, phase)
    tail = (f"[tick] route {done} frame 1200 speed 4.2", f"[tick] route {done} frame 1210 speed 4.0",
            f"[tick] route {done} frame 1220 speed 3.9")
    return SideSnapshot(cfg.name, cfg, sv, vram, hb, evp, tail, at=T0, took_ms=12.0)


def kill_plan(snap: SideSnapshot, verdicts: dict[str, str] | None = None) -> Plan:
    targets = [Target.of("local", m.proc, m.role) for m in snap.evaluator.chain.members]
    v = verdicts or {"heartbeat": snap.heartbeat.beat.value, "evaluator": snap.evaluator.verdict.state.value,
                     "server": snap.server.verdict.state.value}
    return make_plan(Op.STOP_CHAIN, snap.name, "local", targets, v,
                     evidence=("heartbeat: log 1620 s old (stall at 1500 s)",), action="TERM, grace 10 s, KILL")


@dataclass
class FakeBackend:
    """Frozen snapshots, canned plans, and a record of every call the app made."""

    rig: RigConfig = field(default_factory=rig_config)
    snaps: dict[str, SideSnapshot] = field(default_factory=dict)
    audit_records: list[dict[str, Any]] = field(default_factory=list)
    plans: dict[str, Callable[[str], Plan]] = field(default_factory=dict)   # action -> side -> Plan
    calls: list[tuple] = field(default_factory=list)
    hang: set[str] = field(default_factory=set)          # sides whose probe never returns
    recovery_driver: Any = None
    log_tail: int = 3
    _audit_len: int = -1

    def __post_init__(self) -> None:
        for name, cfg in self.rig.sides.items():
            self.snaps.setdefault(name, snapshot(cfg))

    async def start(self) -> None:
        self.calls.append(("start",))

    async def close(self) -> None:
        self.calls.append(("close",))

    async def probe(self, side: str, rpc: bool | None = None) -> SideSnapshot:
        self.calls.append(("probe", side, rpc))
        if side in self.hang:
            await asyncio.sleep(3600)
        return self.snaps[side]

    def quiet_beat(self, side: str, beat: int) -> bool:
        return False   # every beat polls: the tests count the polls the app makes

    async def log_lines(self, side: str, n: int) -> list[str] | None:
        self.calls.append(("log_lines", side, n))
        return [f"[tick] line {i}" for i in range(n)]

    def audit(self) -> list[dict[str, Any]] | None:
        if len(self.audit_records) == self._audit_len:
            return None
        self._audit_len = len(self.audit_records)
        return list(self.audit_records)

    async def scan_ports(self) -> PortsReport:
        self.calls.append(("ports",))
        status = {n: {p: "ok" for p in s.planned_ports} for n, s in self.rig.sides.items()}
        first = next(iter(self.rig.sides.values()))
        status[first.name][first.server.rpc_port + 1] = "RESERVED"
        return PortsReport(status, (f"port {first.server.rpc_port + 1} (streaming): inside reserved range",), 1)

    async def plan(self, action: str, side: str) -> Plan:
        self.calls.append(("plan", action, side))
        if action not in self.plans:
            raise Unavailable(f"ops/{action}.py has not landed")
        return self.plans[action](side)

    async def execute(self, action: str, plan: Plan, conf: Confirmation, report=None) -> ActionResult:
        self.calls.append(("execute", action, plan.side, conf))
        self.audit_records.append({"time": T0 + 60, "side": plan.side, "operation": plan.op.value,
                                   "outcome": "done", "detail": "stopped"})
        return ActionResult(True, "stopped")

    def recovery(self, side: str):
        if self.recovery_driver is None:
            raise Unavailable("ops/actions/recovery.py has not landed")
        self.recovery_driver.side = side
        return self.recovery_driver


@dataclass
class FakeRecovery:
    backend: FakeBackend
    side: str = "A"
    fresh: bool = True
    gate: asyncio.Event | None = None      # when set, wait_fresh blocks until the test opens it
    calls: list[str] = field(default_factory=list)

    async def verdict(self) -> StepOutcome:
        self.calls.append("verdict")
        snap = self.backend.snaps[self.side]
        plan = kill_plan(snap)
        return StepOutcome("ok" if plan.allowed else "refused", "heartbeat STALE · evaluator ALIVE · server ALIVE", plan)

    async def kill(self, plan: Plan, conf: Confirmation) -> StepOutcome:
        self.calls.append("kill")
        return StepOutcome("ok", "harness 5010: terminated; wrapper 5011: terminated; evaluator 5012: killed")

    async def server(self) -> StepOutcome:
        self.calls.append("server")
        return StepOutcome("ok", "server ALIVE (rpc 0.9.15): kept")

    async def relaunch(self) -> StepOutcome:
        self.calls.append("relaunch")
        return StepOutcome("ok", "harness 6001 running (attempt 2); resume True (3 completed records)")

    async def execute(self, plan: Plan, conf: Confirmation) -> StepOutcome:
        self.calls.append("execute")
        return StepOutcome("ok", "done")

    async def wait_fresh(self, report) -> StepOutcome:
        self.calls.append("wait_fresh")
        report("heartbeat STALE 1620s, waiting")
        if self.gate is not None:
            await self.gate.wait()
        return StepOutcome("ok" if self.fresh else "failed", "heartbeat FRESH 1s")


def stale(backend: FakeBackend, side: str = "A") -> None:
    cfg = backend.rig.sides[side]
    backend.snaps[side] = snapshot(cfg, beat=Beat.STALE, age_s=1620.0)


def with_unknown_evaluator(plan: Plan) -> Plan:
    return replace(plan, verdicts={**plan.verdicts, "evaluator": "UNKNOWN"})


@contextlib.asynccontextmanager
async def shown(side: str = "A", size: tuple[int, int] = (120, 40)) -> AsyncIterator[tuple[Any, Any, FakeBackend]]:
    """A running console (no poll loop) on a FakeBackend, with side's snapshot shown: (app, pilot, backend)."""
    from console.tui.app import ConsoleApp
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps[side])
        await pilot.pause(0.1)
        yield app, pilot, b


async def until(pilot, cond: Callable[[], object], what: str, tries: int = 600) -> None:
    """Wait (Pilot pauses of 50 ms, up to tries of them) until cond() is true: a condition, not a sleep."""
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def polls_up(app, pilot) -> None:
    """The backend opened and every side's poll loop is up: before that a poll asked for (`g`) is dropped."""
    await until(pilot, lambda: set(app._poll_wake) == set(app.sides), "the poll loops")
