"""The one gate every destructive operation passes: probe → exact plan → confirmation → re-verify
identities → act → verify → audit line.

Verdict rules are data (RULES): each operation names the verdicts it needs and the values that allow it.
UNKNOWN anywhere refuses, whatever the operation and whatever the confirmation says; so does a missing
verdict. Confirmation can only add a refusal, never remove one.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ops.actions.audit import Audit
from ops.actions.guard_jobs import JobControl, JobTarget, act_on_jobs
from ops.platform.base import Host
from ops.platform.procs import Proc
from ops.platform.verbs import signal_if_same
from ops.tristate import StateWord


class Op(StateWord):
    STOP_CHAIN = "stop-chain"          # recovery: stop a hung evaluator chain
    STOP_SERVER = "stop-server"        # recovery: stop a side's server to restart it
    RECLAIM = "reclaim"                # stop an IDLE side's server
    ADAPTER_POLL = "adapter-poll"      # launch servers on candidate adapters (and stop the failed tries)
    STOP_OWN_LAUNCH = "stop-own-launch"  # undo a launch this operation made (pid + start time recorded at spawn)
    RELAUNCH = "relaunch"              # start an evaluator over an existing checkpoint
    SUBMIT_JOB = "submit-job"          # start sides as scheduler jobs (engine slurm)
    STOP_JOB = "stop-job"              # scancel a side's job (sim down, the operator's stop)
    RECOVER_JOB = "recover-job"        # scancel a hung side's job, to replace it
    REQUEUE_JOB = "requeue-job"        # requeue a job lost to a node failure / time limit / outside kill
    STOP_HUNG_SERVER = "stop-hung-server"  # stop a HUNG server (launcher + shipping process) to restart it
    ADOPT = "adopt"                    # a new supervisor for a running evaluator whose harness died
    STOP_RUN = "stop-run"              # the operator stops a side's run (harness first: no new attempt)
    STOP_UNPATCHED = "stop-unpatched"  # an evaluator that started a second server on an external-server side


UNKNOWN = "UNKNOWN"

# op → verdict name → values that allow it. Every listed verdict must be present.
RULES: dict[Op, dict[str, frozenset[str]]] = {
    Op.STOP_CHAIN: {"heartbeat": frozenset({"STALE"}), "evaluator": frozenset({"ALIVE"}),
                    "server": frozenset({"ALIVE", "DEAD", "HUNG"})},
    Op.STOP_SERVER: {"server": frozenset({"ALIVE"}), "evaluator": frozenset({"DEAD"})},
    Op.RECLAIM: {"server": frozenset({"ALIVE"}), "evaluator": frozenset({"DEAD"}), "clients": frozenset({"NONE"})},
    Op.ADAPTER_POLL: {"server": frozenset({"DEAD"}), "ports": frozenset({"CLEAR"}), "vram": frozenset({"READ"})},
    Op.STOP_OWN_LAUNCH: {"launch": frozenset({"OURS"})},
    Op.STOP_UNPATCHED: {"second_server": frozenset({"SEEN"})},
    # server MANAGED: DEAD, on a side whose evaluator starts its own server (server.managed_by_evaluator).
    Op.RELAUNCH: {"server": frozenset({"ALIVE", "MANAGED"}), "evaluator": frozenset({"DEAD"}),
                  "checkpoint": frozenset({"OK", "ABSENT"}), "ports": frozenset({"CLEAR"})},
    Op.SUBMIT_JOB: {"job": frozenset({"ABSENT"})},
    Op.STOP_JOB: {"job": frozenset({"ALIVE"})},
    Op.RECOVER_JOB: {"job": frozenset({"ALIVE"}), "heartbeat": frozenset({"STALE"})},
    Op.REQUEUE_JOB: {"job": frozenset({"LOST"}), "budget": frozenset({"LEFT"}), "run": frozenset({"CUT"})},
    Op.STOP_RUN: {"evaluator": frozenset({"ALIVE", "DEAD"})},
    Op.STOP_HUNG_SERVER: {"server": frozenset({"HUNG"}), "evaluator": frozenset({"DEAD"})},
    Op.ADOPT: {"evaluator": frozenset({"ALIVE"}), "harness": frozenset({"DEAD"})},
}

# Operations whose targets are a process set the guard itself signals.
KILL_OPS = frozenset({Op.STOP_CHAIN, Op.STOP_SERVER, Op.RECLAIM, Op.STOP_OWN_LAUNCH, Op.STOP_RUN,
                      Op.STOP_HUNG_SERVER, Op.STOP_UNPATCHED})
# Operations on scheduler jobs the guard itself re-verifies and acts on (ops/actions/guard_jobs.py).
JOB_OPS = frozenset({Op.STOP_JOB, Op.RECOVER_JOB, Op.REQUEUE_JOB})


@dataclass(frozen=True)
class Target:
    host: str
    pid: int
    create_time: float
    role: str
    cmdline: tuple[str, ...] | None

    @classmethod
    def of(cls, host: str, proc: Proc, role: str) -> Target:
        return cls(host, proc.pid, proc.create_time, role, proc.cmdline)

    def to_json(self) -> dict:
        return {"host": self.host, "pid": self.pid, "create_time": self.create_time, "role": self.role,
                "cmdline": list(self.cmdline) if self.cmdline is not None else None}

    def start_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.create_time))


@dataclass(frozen=True)
class Plan:
    op: Op
    side: str
    host: str
    targets: tuple[Target, ...]                 # outer → inner
    verdicts: Mapping[str, str]
    evidence: tuple[str, ...] = ()
    action: str = ""                            # the exact command/act, in words
    refused: str | None = None
    needs_typed: bool = False                   # stopping a live server with a client: type the side name
    jobs: tuple[JobTarget, ...] = ()            # the scheduler jobs a job operation acts on

    @property
    def allowed(self) -> bool:
        return self.refused is None

    def to_json(self) -> dict:
        return {"op": self.op.value, "side": self.side, "host": self.host,
                "targets": [t.to_json() for t in self.targets], "verdicts": dict(self.verdicts),
                "evidence": list(self.evidence), "action": self.action, "refused": self.refused,
                "needs_typed": self.needs_typed, **({"jobs": [j.to_json() for j in self.jobs]} if self.jobs else {})}


def check_verdicts(op: Op, verdicts: Mapping[str, str]) -> str | None:
    """The reason the verdicts refuse op, or None when they allow it."""
    unknown = sorted(k for k, v in verdicts.items() if v == UNKNOWN)
    if unknown:
        return f"{', '.join(unknown)} UNKNOWN: cannot measure, so nothing destructive proceeds (fail-closed)"
    for name, allowed in RULES[op].items():
        value = verdicts.get(name)
        if value is None:
            return f"{name} was not probed"
        if value not in allowed:
            return f"{op} needs {name} {' or '.join(sorted(allowed))}, but it is {value}"
    return None


def make_plan(op: Op, side: str, host: str, targets: Sequence[Target],
              verdicts: Mapping[str, str], evidence: tuple[str, ...] = (), action: str = "",
              precondition: str | None = None, needs_typed: bool = False,
              jobs: Sequence[JobTarget] = ()) -> Plan:
    refused = check_verdicts(op, verdicts) or precondition
    if refused is None and op in KILL_OPS and not targets:
        refused = "nothing to stop: the plan has no target"
    if refused is None and op in JOB_OPS and not jobs:
        refused = "nothing to act on: the plan has no job"
    if refused is None and op in KILL_OPS and jobs:
        refused = f"{op} signals processes; a job is stopped with {Op.STOP_JOB}"
    if refused is None and op in JOB_OPS and targets:
        refused = f"{op} acts on jobs; a process target belongs to a process operation"
    if refused is None and any(t.cmdline is None for t in targets):
        refused = "a target's cmdline is unreadable: its role cannot be confirmed"
    return Plan(op, side, host, tuple(targets), dict(verdicts), evidence, action, refused, needs_typed,
                tuple(jobs))


@dataclass(frozen=True)
class Confirmation:
    proceed: bool
    via: str                 # who confirmed: 'tty', '--yes', 'tui', 'harness' … (an action adds its own suffix)
    typed: str | None = None


@dataclass(frozen=True)
class TargetOutcome:
    target: Target
    outcome: Literal["terminated", "killed", "already-gone", "skipped-changed", "failed", "alive"]
    detail: str = ""

    def to_json(self) -> dict:
        return {**self.target.to_json(), "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    executed: bool
    ok: bool
    refused: str | None = None
    targets: tuple[TargetOutcome, ...] = ()
    detail: str = ""
    audit: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"executed": self.executed, "ok": self.ok, "refused": self.refused, "detail": self.detail,
                "targets": [t.to_json() for t in self.targets]}


Action = Callable[[Plan], Awaitable[tuple[bool, str]]]


class Guard:
    def __init__(self, hosts: Mapping[str, Host], audit: Audit, grace_s: float = 10.0, kill_wait_s: float = 5.0,
                 jobs: Mapping[str, JobControl] | None = None):
        self.hosts = hosts
        self.jobs: Mapping[str, JobControl] = jobs or {}
        self.audit = audit
        self.grace_s = grace_s
        self.kill_wait_s = kill_wait_s

    def _refuse(self, plan: Plan, why: str, conf: Confirmation | None) -> Outcome:
        line = self._audit(plan, conf, "refused", why, ())
        return Outcome(plan, executed=False, ok=False, refused=why, audit=line)

    async def execute(self, plan: Plan, conf: Confirmation, action: Action | None = None) -> Outcome:
        if plan.refused:
            return self._refuse(plan, plan.refused, conf)
        if not conf.proceed:
            return self._refuse(plan, "not confirmed", conf)
        if plan.needs_typed and conf.typed != plan.side:
            return self._refuse(plan, f"type the side name ({plan.side}) to stop a server that has a client", conf)
        if plan.op in JOB_OPS:
            return await self._job_op(plan, conf, action)
        if plan.op in KILL_OPS:
            # On disk before the first signal: a console killed mid-plan still leaves the trace of what it
            # was about to signal, and the next console's audit view shows an unfinished plan.
            self._audit(plan, conf, "started", "signalling the targets outer → inner", ())
            results = await self._stop_targets(plan.targets)
            ok = all(r.outcome in ("terminated", "killed", "already-gone") for r in results)
            detail = "; ".join(f"{r.target.role} {r.target.pid}: {r.outcome}" for r in results)
            if action is not None and ok:
                ok, more = await action(plan)
                detail = f"{detail}; {more}"
            line = self._audit(plan, conf, "done" if ok else "incomplete", detail, results)
            return Outcome(plan, True, ok, None, tuple(results), detail, line)
        if action is None:
            return self._refuse(plan, f"{plan.op} has no action", conf)
        # Non-kill ops (a launch) re-verify that none of the named targets changed before acting.
        changed = await self._changed(plan.targets)
        if changed:
            return self._refuse(plan, f"identity changed since the plan: {changed}", conf)
        try:
            ok, detail = await action(plan)
        except Exception as e:  # the audit line must say the action broke, then the caller sees the error
            self._audit(plan, conf, "error", f"{type(e).__name__}: {e}", ())
            raise
        line = self._audit(plan, conf, "done" if ok else "failed", detail, ())
        return Outcome(plan, True, ok, None, (), detail, line)

    async def _job_op(self, plan: Plan, conf: Confirmation, action: Action | None) -> Outcome:
        """Jobs: on disk first, then per target re-verify (id, name, submit time, state) → act → verify."""
        self._audit(plan, conf, "started", "acting on the jobs", ())
        ok, results = await act_on_jobs(plan.op.value, list(plan.jobs), self.jobs)
        detail = "; ".join(f"job {t.job_id}: {o} ({d})" for t, o, d in results)
        if action is not None and ok:
            ok, more = await action(plan)
            detail = f"{detail}; {more}"
        line = self.audit.write({
            "side": plan.side, "host": plan.host, "operation": plan.op.value,
            "outcome": "done" if ok else "incomplete", "detail": detail, "verdicts": dict(plan.verdicts),
            "action": plan.action, "confirmation": {"proceed": conf.proceed, "via": conf.via},
            "targets": [{**t.to_json(), "outcome": o, "detail": d} for t, o, d in results]})
        return Outcome(plan, True, ok, None, (), detail, line)

    async def _changed(self, targets: tuple[Target, ...]) -> str:
        from ops.platform.verbs import process_table
        out = []
        for t in targets:
            table = await process_table(self.hosts[t.host], 10.0, fresh_pids=frozenset([t.pid]))
            p = table.procs.get(t.pid) if table.ok else None
            if not table.ok:
                out.append(f"{t.role} {t.pid}: cannot re-read ({table.error})")
            elif p is None or abs(p.create_time - t.create_time) > 0.05:
                out.append(f"{t.role} {t.pid}")
            elif t.cmdline is not None and p.cmdline != t.cmdline:
                out.append(f"{t.role} {t.pid} exec'd into {p.cmd_text(120)!r}")
        return ", ".join(out)

    async def _stop_targets(self, targets: tuple[Target, ...]) -> list[TargetOutcome]:
        """TERM outer → inner, each re-checked by (pid, create_time) on its host right before the signal;
        wait the grace; KILL what is left, re-checked again; then verify every target gone."""
        state: dict[int, TargetOutcome] = {}
        for t in targets:
            r = await signal_if_same(self.hosts[t.host], t.pid, t.create_time, "SIGTERM", cmdline=t.cmdline)
            if r.outcome == "gone":
                state[t.pid] = TargetOutcome(t, "already-gone")
            elif r.outcome == "changed":
                state[t.pid] = TargetOutcome(t, "skipped-changed", r.detail)
            elif r.outcome == "error":
                state[t.pid] = TargetOutcome(t, "failed", f"TERM: {r.detail}")
        pending = [t for t in targets if t.pid not in state]
        pending = await self._wait_gone(pending, self.grace_s)
        for t in targets:
            if t.pid not in state and t not in pending:
                state[t.pid] = TargetOutcome(t, "terminated")
        for t in pending:
            r = await signal_if_same(self.hosts[t.host], t.pid, t.create_time, "SIGKILL", cmdline=t.cmdline)
            if r.outcome == "changed":
                state[t.pid] = TargetOutcome(t, "skipped-changed", r.detail)
            elif r.outcome == "error":
                state[t.pid] = TargetOutcome(t, "failed", f"KILL: {r.detail}")
        still = await self._wait_gone([t for t in pending if t.pid not in state], self.kill_wait_s)
        for t in pending:
            if t.pid not in state:
                state[t.pid] = TargetOutcome(t, "alive" if t in still else "killed",
                                             "survived SIGKILL (D state?)" if t in still else "")
        return [state[t.pid] for t in targets]

    async def _wait_gone(self, targets: list[Target], within: float) -> list[Target]:
        from ops.platform.verbs import process_table
        deadline = time.monotonic() + within
        left = list(targets)
        while left:
            by_host: dict[str, list[Target]] = {}
            for t in left:
                by_host.setdefault(t.host, []).append(t)
            nxt = []
            for host, ts in by_host.items():
                table = await process_table(self.hosts[host], 10.0, fresh_pids=frozenset(t.pid for t in ts))
                for t in ts:
                    p = table.procs.get(t.pid) if table.ok else None
                    # A zombie has exited: its parent just has not reaped it yet.
                    if not table.ok or (p is not None and abs(p.create_time - t.create_time) <= 0.05
                                        and p.state != "Z"):
                        nxt.append(t)
            left = nxt
            if not left or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        return left

    def _audit(self, plan: Plan, conf: Confirmation | None, outcome: str, detail: str,
               results: list[TargetOutcome] | tuple[TargetOutcome, ...]) -> dict:
        return self.audit.write({
            "side": plan.side, "host": plan.host, "operation": plan.op.value, "outcome": outcome,
            "detail": detail, "verdicts": dict(plan.verdicts), "action": plan.action,
            "confirmation": None if conf is None else {"proceed": conf.proceed, "via": conf.via},
            "targets": [r.to_json() for r in results] if results else [t.to_json() for t in plan.targets],
        })

