"""Guided recovery of a hung side: the evaluator alive, silent, at 0 % CPU in futex_wait (design.md §1).

Seven steps, each with evidence and a status, so the CLI prints them and the TUI shows them as a wizard:

  1 verdict     heartbeat STALE and the evaluator chain alive (+ CPU over a short sample, /proc/PID/wchan);
                refused when the heartbeat is FRESH or anything is UNKNOWN
  2 kill-plan   the whole chain outer → inner (harness → wrapper → evaluator → children), by exact tokens;
                never this process or its ancestors, never another side's process
  3 confirm     the operator's word (typed side name, --yes, or the TUI button)
  4 kill        Guard.execute(Op.STOP_CHAIN): (pid, create_time) re-checked before each signal, TERM,
                grace, KILL, verify gone, audit line
  5 server      keep it if ALIVE; if DEAD say how to restart it (`adapter SIDE`)
  6 relaunch    ops.actions.launch under the resume rule (backup first; refuses a total mismatch)
  7 wait-fresh  the log moves again within a bounded wait

API for a step-by-step driver (the TUI wizard):
    plan = await recovery_plan(live, side)             # steps 1-2 (+ previews of 5-6); reads only
    res  = await execute_kill(live, plan, conf)        # step 4 (re-plans, refuses if anything changed)
    srv  = await server_step(live, side)               # step 5
    lr   = await relaunch(live, side, conf)            # step 6 (ops.actions.launch.LaunchResult)
    hb   = await wait_fresh(live, side, timeout_s)     # step 7
or `await recover(live, side, conf)` for all of it.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from ops.actions import resume as rr
from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, Target, make_plan
from ops.actions.launch import LaunchResult, execute_launch, plan_launch, side_snapshot
from ops.model import RigConfig
from ops.probes.chain import find_chain, protected_pids
from ops.probes.heartbeat import HeartbeatProbe, probe_heartbeat
from ops.probes.prober import SideSnapshot
from ops.rig import LiveRig
from ops.tristate import Beat, State

STEPS = ("verdict", "kill-plan", "confirm", "kill", "server", "relaunch", "wait-fresh")
CPU_SAMPLE_S = 0.5
_CLK_TCK = os.sysconf("SC_CLK_TCK")   # utime/stime are in clock ticks
CPU_IDLE_PCT = 1.0        # "≈ 0": a futex_wait hang burns nothing
DEFAULT_GRACE_S = 10.0
DEFAULT_WAIT_S = 120.0


@dataclass(frozen=True)
class Step:
    name: str
    status: str        # ok | refused | pending | done | failed | keep | action-needed | skipped | blocked
    detail: str

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class ProcSample:
    """CPU over a short window and the kernel wait channel: a hung evaluator shows ≈ 0 % and futex."""

    pid: int
    role: str
    cpu_pct: float | None
    wchan: str | None
    error: str | None = None

    def line(self) -> str:
        cpu = "cpu ?" if self.cpu_pct is None else f"cpu {self.cpu_pct:.1f}%"
        wchan = f", wchan {self.wchan}" if self.wchan else ""
        return f"{self.role} {self.pid}: {cpu}{wchan}" + (f" [{self.error}]" if self.error else "")


@dataclass(frozen=True)
class RecoveryPlan:
    side: str
    verdict: dict[str, str] = field(hash=False)   # heartbeat, server, evaluator
    kill_plan: Plan
    steps: tuple[Step, ...]
    refused: str | None
    samples: tuple[ProcSample, ...] = ()
    resume: rr.ResumeDecision | None = None
    heartbeat_age_s: float | None = None

    @property
    def allowed(self) -> bool:
        return self.refused is None

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def with_step(self, step: Step) -> RecoveryPlan:
        steps = tuple(step if s.name == step.name else s for s in self.steps)
        return RecoveryPlan(self.side, self.verdict, self.kill_plan, steps, self.refused, self.samples,
                            self.resume, self.heartbeat_age_s)

    def to_json(self) -> dict:
        return {"verdict": dict(self.verdict),
                "kill_plan": [{"pid": t.pid, "create_time": t.create_time, "role": t.role,
                               "cmdline": list(t.cmdline) if t.cmdline is not None else None,
                               "host": t.host} for t in self.kill_plan.targets],
                "steps": [s.to_json() for s in self.steps], "refused": self.refused, "side": self.side,
                "samples": [{"pid": s.pid, "role": s.role, "cpu_pct": s.cpu_pct, "wchan": s.wchan,
                             "error": s.error} for s in self.samples],
                "heartbeat_age_s": self.heartbeat_age_s, "evidence": list(self.kill_plan.evidence)}


# ---- step 1: the verdict, with CPU and wchan ----------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2:].split()
    return int(fields[11]) + int(fields[12])   # utime + stime (fields 14, 15 of stat)


def _wchan(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            w = f.read().strip()
        return w if w and w != "0" else None
    except OSError:
        return None   # not readable here (kernel config, permissions): say nothing rather than guess


async def sample_procs(targets: tuple[Target, ...], window_s: float = CPU_SAMPLE_S) -> tuple[ProcSample, ...]:
    """utime+stime read twice, window_s apart (local processes only: remote ones say 'not sampled')."""
    first: dict[int, int | str] = {}
    for t in targets:
        try:
            first[t.pid] = _cpu_ticks(t.pid)
        except (OSError, ValueError, IndexError) as e:
            first[t.pid] = f"{type(e).__name__}: {e}"
    t0 = time.monotonic()
    await asyncio.sleep(window_s)
    dt = time.monotonic() - t0
    out = []
    for t in targets:
        a = first[t.pid]
        if isinstance(a, str):
            out.append(ProcSample(t.pid, t.role, None, None, a))
            continue
        try:
            b = _cpu_ticks(t.pid)
        except (OSError, ValueError, IndexError) as e:
            out.append(ProcSample(t.pid, t.role, None, None, f"{type(e).__name__}: {e}"))
            continue
        out.append(ProcSample(t.pid, t.role, 100.0 * (b - a) / _CLK_TCK / dt, _wchan(t.pid)))
    return tuple(out)


def _verdict_step(snap: SideSnapshot, samples: tuple[ProcSample, ...], refused: str | None) -> Step:
    hb = snap.heartbeat
    age = "?" if hb.age_s is None else f"{hb.age_s:.0f} s"
    ev = snap.evaluator
    parts = [f"heartbeat {hb.beat.value} (log {age} old, stall at {hb.stall_s:.0f} s)",
             f"evaluator {ev.verdict.state.value} ({ev.verdict.summary})",
             f"server {snap.server.verdict.state.value} ({snap.server.verdict.summary})"]
    inner = [s for s in samples if s.role == "evaluator"]
    for s in inner or samples:
        hint = ""
        if s.cpu_pct is not None:
            if s.cpu_pct >= CPU_IDLE_PCT:
                hint = " — busy: check it is not just slow"
            elif hb.beat is Beat.STALE:
                hint = " ≈ 0: hung-like"
            else:   # an idle evaluator whose log still moves is waiting, not hung
                hint = " ≈ 0 (the log still moves: waiting, not hung)"
        parts.append(s.line() + hint)
    return Step("verdict", "refused" if refused else "ok", "; ".join(parts))


def _refusal(snap: SideSnapshot, plan: Plan) -> str | None:
    """The guard's refusal, said in the operator's words where a plain one exists."""
    if plan.refused is None:
        return None
    hb = snap.heartbeat
    if hb.beat is Beat.FRESH:
        return (f"heartbeat FRESH (log {hb.age_s:.0f} s old < stall {hb.stall_s:.0f} s): the side is not hung; "
                "nothing to recover")
    if hb.beat is Beat.NOT_STARTED:
        return "heartbeat NOT_STARTED (no log yet): nothing to recover"
    return plan.refused


# ---- step 2: the kill plan ----------------------------------------------------------------------


async def recovery_plan(live: LiveRig, side: str, *, cpu_window_s: float = CPU_SAMPLE_S) -> RecoveryPlan:
    """Steps 1-2 measured, 3-7 previewed. Reads only: nothing is signalled or written."""
    rig: RigConfig = live.config
    sc = rig.side(side)
    snap, tables = await side_snapshot(live, side)
    host = sc.evaluator.host
    table = tables[host]
    chain = snap.evaluator.chain
    targets = tuple(Target.of(host, m.proc, m.role) for m in chain.members)
    problems = []
    if table.ok:
        # find_chain already leaves these out; checked again because a kill of one's own shell or of the
        # other side's evaluator is the incident this exists to prevent.
        mine = protected_pids(table) if live.hosts[host].is_local else frozenset()
        if mine & {t.pid for t in targets}:
            problems.append(f"the plan holds this console or an ancestor ({sorted(mine & chain.pids)})")
        for other in rig.sides.values():
            if other.name == side or other.evaluator.host != host:
                continue
            clash = chain.pids & find_chain(table, rig, other, local=live.hosts[host].is_local).pids
            if clash:
                problems.append(f"pids {sorted(clash)} belong to side {other.name} as well")
    if snap.evaluator.verdict.state is State.ALIVE and not chain.of("evaluator") and not chain.of("wrapper"):
        problems.append("the chain holds no evaluator process")
    verdicts = {"heartbeat": snap.heartbeat.beat.value, "server": snap.server.verdict.state.value,
                "evaluator": snap.evaluator.verdict.state.value}
    sample = live.hosts[host].is_local and targets and cpu_window_s > 0
    samples = await sample_procs(targets, cpu_window_s) if sample else ()
    evidence = (*(e.line() for e in snap.evaluator.verdict.evidence), snap.heartbeat.evidence.line(),
                *(e.line() for e in snap.server.verdict.evidence), *(s.line() for s in samples))
    kill_plan = make_plan(Op.STOP_CHAIN, side, host, targets, verdicts, evidence=evidence,
                          action="TERM outer → inner, each (pid, create_time) re-checked; grace; KILL; verify gone",
                          precondition="; ".join(problems) or None)
    refused = _refusal(snap, kill_plan)
    decision, _ = rr.decide_for(sc) if live.hosts[host].is_local else (None, None)
    steps = (
        _verdict_step(snap, samples, refused),
        Step("kill-plan", "refused" if refused else "ok",
             ("; ".join(f"{t.role} {t.pid}" for t in targets) or "no process") + (f" — {refused}" if refused else "")),
        Step("confirm", "skipped" if refused else "pending", "" if refused else
             f"type the side name ({side}) or pass --yes; UNKNOWN is never confirmable"),
        Step("kill", "skipped" if refused else "pending",
             "" if refused else f"{len(targets)} process(es), outer → inner"),
        _server_preview(snap, rig, side),
        _relaunch_preview(decision, refused),
        Step("wait-fresh", "skipped" if refused else "pending",
             "" if refused else f"until the log moves again (heartbeat FRESH), at most {DEFAULT_WAIT_S:.0f} s"),
    )
    return RecoveryPlan(side, verdicts, kill_plan, steps, refused, samples, decision, snap.heartbeat.age_s)


def _server_preview(snap: SideSnapshot, rig: RigConfig, side: str) -> Step:
    v = snap.server.verdict
    if v.state is State.ALIVE:
        return Step("server", "keep", f"ALIVE ({v.summary}): kept as it is")
    if v.state is State.DEAD:
        return Step("server", "action-needed", f"DEAD ({v.summary}): after the kill, restart it with "
                    f"`carla-console -c {rig.path} adapter {side}`, then `launch {side}`")
    if v.state is State.HUNG:
        return Step("server", "action-needed", f"HUNG ({v.summary}): after the kill, restart it with "
                    f"`carla-console -c {rig.path} restart-server {side}`, then `launch {side}`")
    return Step("server", "refused", f"UNKNOWN ({v.summary})")


def _relaunch_preview(d: rr.ResumeDecision | None, refused: str | None) -> Step:
    if refused:
        return Step("relaunch", "skipped", "")
    if d is None:
        return Step("relaunch", "blocked", "checkpoint on a remote host: not previewed")
    if d.refused:
        return Step("relaunch", "blocked", f"the relaunch would be refused: {d.refused}")
    return Step("relaunch", "pending", f"harness relaunch, {d.reason}; checkpoint backed up first")


# ---- steps 4-7 ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KillResult:
    outcome: Outcome | None
    step: Step

    @property
    def ok(self) -> bool:
        return self.outcome is not None and self.outcome.ok


def _keys(plan: Plan) -> list[tuple[int, float]]:
    return [(t.pid, round(t.create_time, 2)) for t in plan.targets]


async def execute_kill(live: LiveRig, plan: RecoveryPlan, conf: Confirmation, *, grace_s: float = DEFAULT_GRACE_S,
                       guard: Guard | None = None) -> KillResult:
    """Step 4. Plans again first: the operator confirmed *these* processes under *these* verdicts; if the
    heartbeat came back or the chain changed meanwhile, nothing is signalled."""
    rig: RigConfig = live.config
    guard = guard or Guard(live.hosts, Audit(rig.state_dir), grace_s=grace_s)
    now = await recovery_plan(live, plan.side, cpu_window_s=0.0)
    if now.refused or plan.refused:
        why = now.refused or plan.refused
        out = await guard.execute(now.kill_plan if now.refused else plan.kill_plan, conf)  # audited refusal
        return KillResult(out, Step("kill", "refused", why or "refused"))
    if _keys(now.kill_plan) != _keys(plan.kill_plan):
        was = ", ".join(f"{t.role} {t.pid}" for t in plan.kill_plan.targets)
        is_ = ", ".join(f"{t.role} {t.pid}" for t in now.kill_plan.targets)
        return KillResult(None, Step("kill", "refused", f"the chain changed since the plan (was {was}; now {is_}): "
                                     "plan again"))
    out = await guard.execute(plan.kill_plan, conf)
    if out.refused:
        return KillResult(out, Step("kill", "refused", out.refused))
    return KillResult(out, Step("kill", "done" if out.ok else "failed", out.detail))


async def server_step(live: LiveRig, side: str) -> Step:
    """Step 5: keep an ALIVE server; a DEAD one needs a restart (adapter polling), said not done."""
    snap = await live.prober.side(side, rpc=True)
    return _server_preview(snap, live.config, side)


async def relaunch(live: LiveRig, side: str, conf: Confirmation) -> tuple[LaunchResult | None, Step]:
    """Step 6: the launch of ops.actions.launch (same checks, resume rule, backup), under the recovery's
    confirmation. The killed chain may take a moment to leave the process table: retried briefly."""
    lp = None
    for _ in range(8):
        lp = await plan_launch(live, side)
        if lp.allowed or not any(c.name == "running" and c.status != "ok" for c in lp.checks):
            break
        await asyncio.sleep(0.25)
    assert lp is not None
    if not lp.allowed:
        # Through the guard all the same: the refusal gets its audit line.
        res = await execute_launch(live, lp, conf)
        return res, Step("relaunch", "refused", lp.refused or "refused")
    res = await execute_launch(live, lp, conf)
    detail = res.outcome.refused or res.outcome.detail
    return res, Step("relaunch", "done" if res.ok else "failed", f"resume={lp.decision.resume}: {detail}")


async def wait_fresh(live: LiveRig, side: str, timeout_s: float = DEFAULT_WAIT_S, since: float | None = None,
                     poll_s: float = 0.5) -> tuple[HeartbeatProbe | None, Step]:
    """Step 7: poll the log's mtime until FRESH (and newer than `since`, when given), at most timeout_s."""
    sc = live.config.side(side)
    host = live.hosts[sc.evaluator.host]
    log = sc.evaluator.path(sc.evaluator.log)
    deadline = time.monotonic() + timeout_s
    hb = None
    while True:
        hb = await probe_heartbeat(host, log, sc.heartbeat.stall_s, sc.server.probe_timeout_s)
        moved = since is None or (hb.age_s is not None and time.time() - hb.age_s > since)
        if hb.beat is Beat.FRESH and moved:
            return hb, Step("wait-fresh", "done", f"heartbeat FRESH (log {hb.age_s:.1f} s old)")
        if time.monotonic() >= deadline:
            return hb, Step("wait-fresh", "failed", f"no FRESH heartbeat within {timeout_s:.0f} s "
                            f"(last: {hb.beat.value}, {hb.evidence.line()})")
        await asyncio.sleep(poll_s)


@dataclass(frozen=True)
class RecoveryRun:
    plan: RecoveryPlan
    steps: tuple[Step, ...]
    ok: bool
    launch: LaunchResult | None = None

    def to_json(self) -> dict:
        return {**self.plan.to_json(), "steps": [s.to_json() for s in self.steps], "ok": self.ok,
                "launch": self.launch.to_json() if self.launch else None}


async def recover(live: LiveRig, plan: RecoveryPlan, conf: Confirmation, *, grace_s: float = DEFAULT_GRACE_S,
                  wait_s: float = DEFAULT_WAIT_S) -> RecoveryRun:
    """Steps 3-7 after the operator's confirmation `conf` of `plan`."""
    steps = {s.name: s for s in plan.steps}
    def done(ok: bool, launch: LaunchResult | None = None) -> RecoveryRun:
        return RecoveryRun(plan, tuple(steps[n] for n in STEPS), ok, launch)
    if plan.refused:
        return done(False)
    if not conf.proceed:
        steps["confirm"] = Step("confirm", "refused", f"not confirmed ({conf.via})")
        return done(False)
    steps["confirm"] = Step("confirm", "done", f"confirmed via {conf.via}")
    killed_at = time.time()
    kill = await execute_kill(live, plan, conf, grace_s=grace_s)
    steps["kill"] = kill.step
    if not kill.ok:
        return done(False)
    steps["server"] = await server_step(live, plan.side)
    if steps["server"].status != "keep":
        steps["relaunch"] = Step("relaunch", "skipped", "the server is not ALIVE: restart it first (step 5)")
        return done(False)
    launch, steps["relaunch"] = await relaunch(live, plan.side, conf)
    if steps["relaunch"].status != "done":
        return done(False, launch)
    _hb, steps["wait-fresh"] = await wait_fresh(live, plan.side, wait_s, since=killed_at)
    return done(steps["wait-fresh"].status == "done", launch)

