"""Issue 17: every state change and every automatic action gets exactly ONE timed line in the event log.

The audit trail may hold several records for one operation (a kill plan's `started` and `done`, adapter
polling's per-candidate `adapter-launch` / `adapter-try` before its `adapter-poll` result): the log shows
one. The record sequences here are the ones the real operations write (tests/integration/test_adapter.py
checks the same fold on records written by a real polling on the sim)."""
from __future__ import annotations

import time
from dataclasses import replace

from console.tui import story
from console.tui.app import ConsoleApp
from console.tui.audit_fold import OPEN_MAX_S, AuditFold
from console.tui.protocol import ActionResult
from ops.actions.guard import Confirmation, Plan
from ops.probes.harness_state import AttemptRecord, HarnessState
from tests.tui.fakes import T0, FakeBackend, kill_plan, snapshot, stale, until
from widgets.event_log import EventLog, audit_text

HARNESS = {"proceed": True, "via": "harness"}


def rec(op: str, outcome: str, t: float, pid: int = 4242, side: str = "A", **kw) -> dict:
    return {"time": t, "side": side, "pid": pid, "operation": op, "outcome": outcome, **kw}


def adapter_accepted(t: float, pid: int = 4242) -> list[dict]:
    """What an accepted polling writes (candidates 2, 0: 2 crashes, 0 renders)."""
    return [rec("adapter-launch", "launched", t, pid, adapter=2), rec("adapter-try", "crashed", t + 2, pid, adapter=2),
            rec("adapter-launch", "launched", t + 3, pid, adapter=0), rec("adapter-try", "accepted", t + 5, pid, adapter=0),
            rec("adapter-poll", "done", t + 5, pid, detail="adapter 0 accepted: +6000 MiB ≥ 4096 MiB, server pid 7 "
                "(tried before: 2 crashed)")]


def log_lines(app: ConsoleApp) -> list[str]:
    return [strip.text for strip in app.main.query_one(EventLog).lines]


# ----- the fold ---------------------------------------------------------------------------------------

def test_an_accepted_adapter_polling_is_one_line() -> None:
    shown = AuditFold().lines(adapter_accepted(T0), T0 + 6)
    assert [(r["operation"], r["outcome"]) for r in shown] == [("adapter-poll", "done")]
    assert "adapter 0 accepted" in audit_text(shown[0]).plain and "2 crashed" in audit_text(shown[0]).plain


def test_a_kill_plan_is_one_line_and_a_refusal_is_one_line() -> None:
    fold = AuditFold()
    started = rec("recover-chain", "started", T0, confirmation=HARNESS)
    assert fold.lines([started], T0 + 1) == [] and fold.pending       # held back while the plan runs
    done = rec("recover-chain", "done", T0 + 12, confirmation=HARNESS)
    assert fold.lines([done], T0 + 13) == [done] and not fold.pending
    refused = rec("reclaim", "refused", T0 + 20, detail="server UNKNOWN")
    assert fold.lines([refused], T0 + 21) == [refused]


def test_two_writers_fold_apart() -> None:
    """A console's and a harness's operations interleave in one file: each ends its own."""
    a = adapter_accepted(T0, pid=1)
    b = [rec("stop-chain", "started", T0 + 1, pid=2, side="B"), rec("stop-chain", "done", T0 + 4, pid=2, side="B")]
    mixed = [a[0], b[0], a[1], a[2], b[1], a[3], a[4]]
    shown = AuditFold().lines(mixed, T0 + 6)
    assert [(r["side"], r["operation"], r["outcome"]) for r in shown] == [("B", "stop-chain", "done"),
                                                                          ("A", "adapter-poll", "done")]


def test_an_operation_that_never_ended_is_shown() -> None:
    """Its writer died mid-plan: a console started later shows it at once, a running one after OPEN_MAX_S."""
    started = rec("stop-chain", "started", T0, detail="signalling the targets outer → inner")
    later = rec("launch", "done", T0 + 5)
    assert AuditFold().lines([started, later], T0 + 10, backlog=True) == [started, later]   # in time order
    fold = AuditFold()
    assert fold.lines([started], T0 + 10) == []
    assert fold.lines([], T0 + OPEN_MAX_S - 1) == []
    assert fold.lines([], T0 + OPEN_MAX_S + 1) == [started]
    assert fold.lines([], T0 + OPEN_MAX_S + 2) == []                 # once


def test_unparseable_lines_stay_in_place() -> None:
    bad = {"unparseable": "{oops"}
    shown = AuditFold().lines([rec("launch", "done", T0), bad, rec("stop-chain", "started", T0 + 1)], T0 + 2,
                              backlog=True)
    assert shown[1] == bad and shown[2]["outcome"] == "started"


# ----- the story: one line per state change --------------------------------------------------------

def _harness(snap, *, attempt: int, code: int | None, status: str = "running", supervisor: str = "watching",
             alive: bool = True):
    h = HarnessState(snap.name, 5010, T0 - 900, 3, status=status, attempt=attempt, supervisor=supervisor,
                     attempts=[AttemptRecord(attempt, T0 - 800, False, ["python", "eval.py"], 5012, T0, None if
                                             code is None else T0 + 1, code)])
    return replace(snap, evaluator=replace(snap.evaluator, harness=h, harness_alive=alive))


def test_a_lifecycle_move_rides_on_the_evaluators_line() -> None:
    """A crash moves the lifecycle RUNNING → STARTING and writes the exit code: one line, not two."""
    cfg = FakeBackend().rig.sides["A"]
    running = _harness(snapshot(cfg), attempt=1, code=None)
    gone = _harness(snapshot(cfg, evaluator="DEAD", phase="restarting"), attempt=1, code=1)
    assert running.lifecycle.value == "RUNNING" and gone.lifecycle.value == "STARTING"
    (line,) = story.changes(running, gone)
    assert "exit code 1" in line.text and "[RUNNING → STARTING]" in line.text
    # A move nothing else said gets a line of its own.
    stopped = _harness(snapshot(cfg, evaluator="DEAD", phase="restarting"), attempt=1, code=1, alive=False)
    own, idle = story.changes(gone, stopped)
    assert own.text.startswith("STARTING → STOPPED: harness 5010 gone") and own.word == "STOPPED"
    assert idle.word == "IDLE"        # another change: the server now renders for nobody


# ----- in the app -------------------------------------------------------------------------------------

class AdapterBackend(FakeBackend):
    """execute('adapter') reports progress as the live backend does and writes what the real polling writes."""

    async def execute(self, action: str, plan: Plan, conf: Confirmation, report=None) -> ActionResult:
        self.calls.append(("execute", action, plan.side, conf))
        for what in ("adapter 2: baseline gpu0 41230 MiB", "adapter 2: launched pid 7", "adapter 2: verdict crashed",
                     "adapter 0: launched pid 9", "adapter 0: verdict accepted", "adapter: done"):
            if report is not None:
                report(f"{plan.side} {what}")
        self.audit_records.extend(adapter_accepted(T0 + 60))
        return ActionResult(True, "adapter 0 accepted")


async def test_an_accepted_adapter_writes_one_timed_line_in_the_app() -> None:
    b = AdapterBackend()
    stale(b)
    b.plans["adapter"] = lambda side: kill_plan(b.snaps[side])
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend started")
        before = len(log_lines(app))
        await pilot.press("a")
        await until(pilot, lambda: app.screen.id != "main", "the modal")
        await pilot.press("tab", "tab", "enter")
        await until(pilot, lambda: any(c[0] == "execute" for c in b.calls) and app.screen.id == "main",
                    "the polling ran")
        await until(pilot, lambda: any("adapter-poll" in ln for ln in log_lines(app)[before:]), "its line")
        await pilot.pause(0.2)
        new = log_lines(app)[before:]
        (line,) = [ln for ln in new if "adapter" in ln]    # not the progress, not the per-candidate records
        assert "A adapter-poll done" in line and "adapter 0 accepted" in line, new


async def test_an_automatic_recovery_is_one_line_per_action_in_the_app() -> None:
    """The harness recovers a STALE evaluator: its kill plan (started, done) and its attempt start."""
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend started")
        before = len(log_lines(app))
        now = time.time()    # the app holds an open plan back for OPEN_MAX_S of its own clock
        b.audit_records.append(rec("recover-chain", "started", now, pid=5010, confirmation=HARNESS))
        app.feed_audit()
        b.audit_records += [rec("recover-chain", "done", now + 8, pid=5010, confirmation=HARNESS,
                                detail="harness 5010: terminated; wrapper 5011: terminated"),
                            rec("relaunch", "done", now + 9, pid=5010, confirmation=HARNESS, detail="attempt 2")]
        app.feed_audit()
        await pilot.pause(0.2)
        new = log_lines(app)[before:]
        assert len(new) == 2, new
        assert "A harness: recover-chain done" in new[0] and "A harness: attempt start done" in new[1]
