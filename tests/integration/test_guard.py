"""The gate, exhaustively: every operation × every verdict value, and the kill path on real processes."""
from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys

import pytest

from ops.actions.audit import Audit
from ops.actions.guard import (
    JOB_OPS,
    KILL_OPS,
    RULES,
    Confirmation,
    Guard,
    JobTarget,
    Op,
    Target,
    check_verdicts,
    make_plan,
)
from ops.platform.local import LocalHost
from ops.platform.procs import read_proc

# Every value each verdict can take, UNKNOWN included.
VALUES = {
    "heartbeat": ["FRESH", "STALE", "UNKNOWN", "NOT_STARTED"],
    "evaluator": ["ALIVE", "DEAD", "UNKNOWN"],
    "server": ["ALIVE", "DEAD", "HUNG", "MANAGED", "UNKNOWN"],
    "clients": ["NONE", "SOME", "UNKNOWN"],
    "ports": ["CLEAR", "CONFLICT", "UNKNOWN"],
    "vram": ["READ", "UNKNOWN"],
    "launch": ["OURS", "UNKNOWN"],
    "harness": ["ALIVE", "DEAD", "UNKNOWN"],
    "checkpoint": ["OK", "ABSENT", "MISMATCH", "UNKNOWN"],
    "job": ["ABSENT", "ALIVE", "DEAD", "LOST", "UNKNOWN"],
    "budget": ["LEFT", "SPENT", "UNKNOWN"],
    "run": ["CUT", "ENDED", "UNKNOWN"],
    "second_server": ["SEEN", "UNKNOWN"],
}
CASES = [(op, combo) for op in Op
         for combo in itertools.product(*(VALUES[k] for k in RULES[op]))]


def _target(pid: int = 4242) -> Target:
    return Target("local", pid, 1.0, "evaluator", ("python", "x.py"))


def _plan(op: Op, verdicts: dict[str, str]):
    """A job operation's target is a job; every other operation's a process."""
    if op in JOB_OPS:
        return make_plan(op, "A", "local", [], verdicts, jobs=[JobTarget("c", "4242", "cc.r.A", "2026-12-01T00:00:00")])
    return make_plan(op, "A", "local", [_target()], verdicts)


@pytest.mark.parametrize("op,combo", CASES, ids=[f"{op.value}-{'-'.join(c)}" for op, c in CASES])
def test_every_verdict_for_every_operation(op: Op, combo: tuple[str, ...]) -> None:
    verdicts = dict(zip(RULES[op], combo))
    expected_ok = all(v in RULES[op][k] for k, v in verdicts.items())
    plan = _plan(op, verdicts)
    assert plan.allowed is expected_ok, (verdicts, plan.refused)
    if "UNKNOWN" in combo:
        assert not plan.allowed and "UNKNOWN" in plan.refused
    # A confirmation never turns a refusal into an action.
    for conf in (Confirmation(True, "--yes", typed="A"), Confirmation(False, "tty")):
        out = asyncio.run(Guard({"local": LocalHost()}, _NullAudit()).execute(plan, conf, action=_never))
        if not plan.allowed or not conf.proceed:
            assert not out.executed and out.refused


class _NullAudit(Audit):
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def write(self, record: dict) -> dict:
        self.lines.append(record)
        return record


async def _never(plan):  # pragma: no cover - must not run for refused plans
    if not plan.allowed:
        raise AssertionError("action ran for a refused plan")
    return True, "ran"


def test_missing_verdict_refuses() -> None:
    for op in Op:
        assert check_verdicts(op, {}) is not None


def test_unknown_extra_verdict_refuses_even_if_rules_pass() -> None:
    v = {"server": "ALIVE", "evaluator": "DEAD", "clients": "NONE", "vram": "UNKNOWN"}
    assert "UNKNOWN" in check_verdicts(Op.RECLAIM, v)


def test_unreadable_cmdline_refuses() -> None:
    plan = make_plan(Op.STOP_OWN_LAUNCH, "A", "local", [Target("local", 1, 1.0, "server", None)], {"launch": "OURS"})
    assert not plan.allowed and "unreadable" in plan.refused


def test_kill_op_without_targets_refuses() -> None:
    for op in KILL_OPS:
        verdicts = {k: sorted(v)[0] for k, v in RULES[op].items()}
        assert not make_plan(op, "A", "local", [], verdicts).allowed


def test_typed_confirmation_required_when_asked(tmp_path) -> None:
    plan = make_plan(Op.STOP_OWN_LAUNCH, "A", "local", [_target()], {"launch": "OURS"}, needs_typed=True)
    out = asyncio.run(Guard({"local": LocalHost()}, Audit(tmp_path)).execute(plan, Confirmation(True, "tui", "B")))
    assert out.refused and "type the side name" in out.refused
    assert Audit(tmp_path).read()[-1]["outcome"] == "refused"


def _spawn(code: str) -> subprocess.Popen:
    """A python child that says "ready" once `code`'s set-up has run (a SIGTERM handler, say): waiting on
    that line, not on a sleep, is what makes a loaded machine behave like an idle one here."""
    p = subprocess.Popen([sys.executable, "-c", code.replace("time.sleep(60)", "print('ready', flush=True); time.sleep(60)")],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_stop_targets_term_then_kill_and_audit(tmp_path) -> None:
    polite = _spawn("import time; time.sleep(60)")
    stubborn = _spawn("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    bystander = _spawn("import time; time.sleep(60)")
    try:
        targets = [Target.of("local", read_proc(p.pid), role) for p, role in ((polite, "harness"), (stubborn, "evaluator"))]
        plan = make_plan(Op.STOP_OWN_LAUNCH, "A", "local", targets, {"launch": "OURS"})
        guard = Guard({"local": LocalHost()}, Audit(tmp_path), grace_s=0.5, kill_wait_s=3)
        out = asyncio.run(guard.execute(plan, Confirmation(True, "--yes")))
        assert out.ok, out
        assert [t.outcome for t in out.targets] == ["terminated", "killed"]
        assert polite.wait(3) is not None and stubborn.wait(3) is not None
        assert bystander.poll() is None
        started, line = Audit(tmp_path).read()[-2:]
        assert started["outcome"] == "started"       # on disk before the first signal
        assert [t["pid"] for t in started["targets"]] == [polite.pid, stubborn.pid]
        assert line["operation"] == "stop-own-launch" and line["outcome"] == "done"
        assert [t["pid"] for t in line["targets"]] == [polite.pid, stubborn.pid]
    finally:
        for p in (polite, stubborn, bystander):
            p.kill()
            p.wait()


def test_changed_identity_is_skipped(tmp_path) -> None:
    p = _spawn("import time; time.sleep(60)")
    try:
        real = read_proc(p.pid)
        wrong = Target("local", p.pid, real.create_time - 100.0, "evaluator", real.cmdline)
        plan = make_plan(Op.STOP_OWN_LAUNCH, "A", "local", [wrong], {"launch": "OURS"})
        out = asyncio.run(Guard({"local": LocalHost()}, Audit(tmp_path), grace_s=0.2).execute(
            plan, Confirmation(True, "--yes")))
        assert out.targets[0].outcome == "skipped-changed" and not out.ok
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
