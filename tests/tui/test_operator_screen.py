"""Issue 17 on frozen snapshots: the event log's story, plans that show what identifies a target, no dead
ends (q from any screen, Esc back), a finished side's launch refused, the modal at once on a slow plan,
the detail view, the keymap file, the pane's wording."""
from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from console.tui import story
from console.tui.app import ConsoleApp
from console.tui.keymap import KeymapError, keymap_ids, load_keymap
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.help import HelpScreen
from console.tui.screens.wizard import RecoveryWizard
from ops.probes.harness_state import AttemptRecord, HarnessState
from ops.tristate import Beat
from tests.tui.fakes import T0, FakeBackend, FakeRecovery, kill_plan, snapshot, stale
from widgets.event_log import EventLog, audit_text
from widgets.plan_view import PlanTargets, identity
from widgets.side_parts import EvaluatorLine, ServerLine
from widgets.words import keys_for_cli


def plain(renderable, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def log_text(app: ConsoleApp) -> list[str]:
    return [strip.text for strip in app.main.query_one(EventLog).lines]


async def until(pilot, cond, what: str, tries: int = 200) -> None:
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def with_attempts(s, *, attempt: int, codes: dict[int, int | None], status: str = "running"):
    h = HarnessState(s.name, 5010, T0 - 900, 3, status=status, attempt=attempt,
                     attempts=[AttemptRecord(n, T0 - 800 + n, n > 1, ["python", "eval.py"], 5012, T0,
                                             None if codes.get(n) is None else T0 + n, codes.get(n))
                               for n in range(1, attempt + 1)])
    return replace(s, evaluator=replace(s.evaluator, harness=h))


# ----- the story -------------------------------------------------------------------------------------

def test_story_one_line_per_change_with_evidence() -> None:
    b = FakeBackend()
    cfg = b.rig.sides["A"]
    fresh = snapshot(cfg)
    stale_ = snapshot(cfg, beat=Beat.STALE, age_s=1620.0)
    first = story.changes(None, fresh)
    assert len(first) == 1 and "first look" in first[0].text
    assert story.changes(fresh, fresh) == []                         # nothing changed: no line
    lines = story.changes(fresh, stale_)
    assert [c.word for c in lines] == ["STALE"]
    assert "heartbeat STALE" in lines[0].text and "27m00s" in lines[0].text
    assert story.changes(stale_, stale_) == []                       # STALE for an hour: still one line

    # A crash between two polls: attempt 1 ended with exit code 1, attempt 2 runs: one line.
    one = with_attempts(fresh, attempt=1, codes={1: None})
    two = with_attempts(fresh, attempt=2, codes={1: 1})
    crash = story.changes(one, two)
    assert len(crash) == 1 and "attempt 1 exited: exit code 1" in crash[0].text and "attempt 2/3" in crash[0].text

    # Seen while restarting: first the evaluator gone (code not reaped yet), then the exit code, once.
    gone = with_attempts(fresh, attempt=1, codes={1: None})
    gone = replace(gone, evaluator=replace(gone.evaluator, phase="restarting"))
    reaped = with_attempts(fresh, attempt=1, codes={1: 3})
    reaped = replace(reaped, evaluator=replace(reaped.evaluator, phase="restarting"))
    first_ = story.changes(one, gone)
    assert len(first_) == 1 and "restarts it" in first_[0].text
    seen = story.changes(gone, reaped)
    assert len(seen) == 1 and "exit code 3" in seen[0].text
    assert story.changes(reaped, reaped) == []

    done = snapshot(cfg, evaluator="DEAD", phase="finished", done=10, total=10)
    fin = story.changes(fresh, done)
    assert any("finished" in c.text and "10/10" in c.text for c in fin), fin
    dead = snapshot(cfg, server="DEAD")
    assert [c.word for c in story.changes(fresh, dead)] == ["DEAD"]


def test_launch_and_harness_records_read_differently() -> None:
    console = {"time": T0, "side": "A", "operation": "relaunch", "outcome": "done",
               "detail": "harness 1 running (attempt 1)", "confirmation": {"proceed": True, "via": "tui"}}
    harness = {**console, "detail": "attempt 1: wrapper pid 2", "confirmation": {"proceed": True, "via": "harness"}}
    a, b = audit_text(console).plain, audit_text(harness).plain
    assert "A launch done" in a and "A harness: attempt start done" in b and a != b


async def test_state_changes_reach_the_event_log_and_long_lines_wrap() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        stale(b)
        app.show_snapshot(b.snaps["A"])
        app.note("x" * 150 + " END")
        await pilot.pause(0.2)
        text = log_text(app)
        assert any("A heartbeat STALE" in t for t in text), text
        assert any(t.rstrip().endswith("END") for t in text), text     # wrapped, not cut


# ----- plans -----------------------------------------------------------------------------------------

def test_identity_shows_program_and_the_sides_tokens_first() -> None:
    assert identity(("/tmp/x/.venv/bin/python", "/tmp/x/leaderboard/leaderboard_evaluator.py", "--routes",
                     "r.xml", "--port", "2000", "--traffic-manager-port", "8010", "--resume", "True")) == \
        "leaderboard_evaluator.py --port 2000 --traffic-manager-port 8010 --resume True"
    assert identity(("/opt/carla/CarlaUE4-Linux-Shipping", "CarlaUE4", "-RenderOffScreen",
                     "-carla-rpc-port=2000", "-graphicsadapter=1")) == \
        "CarlaUE4-Linux-Shipping -carla-rpc-port=2000 -graphicsadapter=1"
    assert identity(("/usr/bin/conda", "run", "-n", "b2d", "python", "eval.py")) == "conda -n b2d"
    assert identity(("/tmp/x/.venv/bin/python", "/tmp/x/.venv/bin/carla-console", "-c", "rig.yaml", "harness",
                     "A")) == "carla-console harness A"
    assert identity(None) == "<cmdline unreadable>"


async def test_kill_plan_rows_show_tokens_at_80_columns_and_v_shows_the_full_argv() -> None:
    b = FakeBackend()
    stale(b)
    b.plans["reclaim"] = lambda side: kill_plan(b.snaps[side])
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.plan is not None, "modal")
        await pilot.pause(0.2)
        text = plain(app.screen.query_one(PlanTargets).table, 76)
        assert "--port 2000" in text and "--traffic-manager-port 8010" in text, text
        await pilot.press("v")
        await pilot.pause(0.2)
        assert app.screen.__class__.__name__ == "ReportScreen"
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert isinstance(app.screen, ConfirmScreen)


async def test_the_modal_opens_at_once_and_says_what_is_checked_while_the_plan_is_built() -> None:
    b = FakeBackend()
    gate = asyncio.Event()

    async def slow(side: str):
        await gate.wait()
        return kill_plan(b.snaps[side])
    app = ConsoleApp(b, poll=False)
    b.plan = lambda action, side: slow(side)   # type: ignore[method-assign,assignment]
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the modal")
        modal = app.screen
        assert modal.plan is None and "checking:" in str(modal.query_one("#targets").render())
        assert modal.query_one("#proceed").disabled
        gate.set()
        await until(pilot, lambda: modal.plan is not None, "the plan")
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.screen is app.main


async def test_a_finished_sides_launch_is_refused_with_the_reason() -> None:
    b = FakeBackend()
    b.snaps["A"] = snapshot(b.rig.sides["A"], evaluator="DEAD", phase="finished", done=10, total=10)
    b.plans["launch"] = lambda side: kill_plan(b.snaps[side])
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        await pilot.press("l")
        await pilot.pause(0.3)
        assert app.screen is app.main
        assert not [c for c in b.calls if c[0] == "plan"]
        assert any("launch refused" in t and "10/10" in t for t in log_text(app)), log_text(app)


# ----- no dead ends ----------------------------------------------------------------------------------

async def test_q_quits_from_the_recovery_screen_and_esc_steps_back() -> None:
    b = FakeBackend()
    stale(b)
    rec = FakeRecovery(b)
    rec.gate = asyncio.Event()
    b.recovery_driver = rec
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "back on main")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the kill modal")
        await pilot.press("escape")                                       # cancels the modal ...
        await until(pilot, lambda: isinstance(app.screen, RecoveryWizard), "the wizard")
        await pilot.press("q")                                            # ... and q quits from the wizard
        await until(pilot, lambda: not app.is_running, "the app to exit")


async def test_detail_view_shows_argv_attempts_and_the_log() -> None:
    b = FakeBackend()
    b.snaps["A"] = with_attempts(b.snaps["A"], attempt=2, codes={1: 1})
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail view")
        await until(pilot, lambda: ("log_lines", "A", 50) in b.calls, "the log read")
        await pilot.pause(0.2)
        procs = plain(app.screen.body, 116)
        assert "python eval.py --port 2000 --traffic-manager-port 8010" in procs, procs
        assert "exit" in procs.lower() and " 1 " in procs
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "back on main")


# ----- keymap, wording -------------------------------------------------------------------------------

def test_keymap_file_all_errors_at_once(tmp_path: Path) -> None:
    f = tmp_path / "keymap.yaml"
    f.write_text("launch: ctrl+l\nlanch: f5\nreclaim: 3\n")
    with pytest.raises(KeymapError) as e:
        load_keymap(f, required=True)
    msg = str(e.value)
    assert f"{f}:2: 'lanch'" in msg and f"{f}:3: reclaim" in msg
    f.write_text("launch: ctrl+l\ndetail: d,space\n")
    assert load_keymap(f, required=True) == {"launch": "ctrl+l", "detail": "d,space"}
    assert load_keymap(tmp_path / "absent.yaml", required=False) == {}
    assert {"launch", "recover", "reclaim", "adapter", "quit", "detail"} <= set(keymap_ids())


async def test_keymap_rebinds_a_key() -> None:
    b = FakeBackend()
    b.snaps["A"] = snapshot(b.rig.sides["A"], evaluator="DEAD", phase="finished", done=10, total=10)
    app = ConsoleApp(b, poll=False, keymap={"launch": "f5"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        app.show_snapshot(b.snaps["A"])
        await pilot.press("l")
        await pilot.pause(0.2)
        assert not any("launch refused" in t for t in log_text(app))
        await pilot.press("f5")
        await pilot.pause(0.2)
        assert any("launch refused" in t for t in log_text(app))


async def test_pane_wording() -> None:
    b = FakeBackend(rig=FakeBackend().rig)
    cfg = b.rig.sides["A"]
    starting = snapshot(cfg, evaluator="DEAD", phase="restarting", attempt=0)
    finished = snapshot(cfg, evaluator="DEAD", phase="finished", done=10, total=10)
    idle = snapshot(cfg, evaluator="DEAD", phase="finished")
    app = ConsoleApp(b, poll=False, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        pane = app.main.pane("A")
        for snap, want, never in ((starting, "eval   starting", "DEAD"), (finished, "eval   finished", "DEAD")):
            pane.show(snap)
            line = pane.part(EvaluatorLine).render().plain
            assert line.startswith(want) and never not in line, line
        pane.show(replace(idle, evaluator=replace(idle.evaluator, harness_alive=False)))
        server = pane.part(ServerLine).render().plain
        assert "IDLE" in server and "x reclaims" not in server      # read-only: no key to advertise


def test_cli_advice_becomes_keys() -> None:
    assert keys_for_cli("restart it with `carla-console -c /r.yaml adapter A`, then `launch A`") == \
        "restart it with key a (adapter polling), then l (launch)"
    assert "key a" in keys_for_cli("start it first (carla-console adapter A)")
