"""Issue 15 in the TUI (Pilot): `h` stops a HUNG server by its exact pids and restarts it, through the same
modal as every destructive key (UNKNOWN refuses, a running evaluator refuses, Cancel touches nothing); the
terminal bell rings once when a side's supervisor needs a human, unless the side's `supervisor.bell` is off.
"""
from __future__ import annotations

import re
from dataclasses import replace

from textual.widgets import Button

from console.tui.app import ConsoleApp
from console.tui.protocol import ActionResult
from console.tui.screens.confirm import ConfirmScreen
from ops.actions.guard import Confirmation, Plan
from ops.actions.restart_server import plan_stop_hung
from ops.model import SupervisorConfig
from ops.probes.harness_state import HarnessState
from ops.tristate import State, Verdict
from tests.tui.fakes import T0, FakeBackend, ev, snapshot, until
from widgets.event_log import EventLog


def log_lines(app: ConsoleApp) -> list[str]:
    """The event log's lines, a wrapped line joined again (each line starts with its time)."""
    out: list[str] = []
    for strip in app.main.query_one(EventLog).lines:
        text = strip.text.rstrip()
        if out and not re.match(r"\d\d:\d\d:\d\d ", text):
            out[-1] += " " + text.strip()
        else:
            out.append(text)
    return out


def hung(b: FakeBackend, side: str = "A", *, evaluator: str = "DEAD", server: State = State.HUNG):
    """Side's server process and port up, its RPC silent over K probes (HUNG), or not measurable (UNKNOWN)."""
    cfg = b.rig.sides[side]
    s = snapshot(cfg, evaluator=evaluator, phase="running" if evaluator == "ALIVE" else "restarting")
    why = ("rpc silent: 3 probes over 62 s (process and port up)" if server is State.HUNG
           else "rpc probe failed: carla client not importable")
    verdict = Verdict(server, (*s.server.verdict.evidence, ev("rpc silence", server is State.HUNG, why)), why)
    s = replace(s, server=replace(s.server, verdict=verdict))
    b.snaps[side] = s
    b.plans["restart-server"] = lambda name: plan_stop_hung(b.snaps[name], cfg.server.host)
    return s


class RestartBackend(FakeBackend):
    async def execute(self, action: str, plan: Plan, conf: Confirmation, report=None) -> ActionResult:
        self.calls.append(("execute", action, plan.side, conf))
        self.audit_records.append({"time": T0 + 60, "side": plan.side, "operation": plan.op.value, "outcome": "done",
                                   "detail": "launcher 4100: terminated; server 4100: terminated",
                                   "confirmation": {"proceed": conf.proceed, "via": conf.via}})
        return ActionResult(True, "stopped; adapter 0 accepted")


def executed(b: FakeBackend) -> list[tuple]:
    return [c for c in b.calls if c[0] == "execute"]


async def open_h(pilot, app: ConsoleApp) -> ConfirmScreen:
    await pilot.press("h")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.plan is not None, "the plan")
    screen = app.screen
    assert isinstance(screen, ConfirmScreen)
    return screen


# ----- h: the hung server by hand --------------------------------------------------------------------

async def test_h_stops_a_hung_server_by_its_pids_and_restarts_it() -> None:
    b = RestartBackend()
    hung(b)
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        app.show_snapshot(b.snaps["A"])
        screen = await open_h(pilot, app)
        plan = screen.plan
        assert plan is not None and plan.op.value == "stop-hung-server" and plan.allowed
        # The fake server is one shipping process: the one target, by pid and start time.
        (target,) = plan.targets
        sp = b.snaps["A"].server.procs[0]
        assert (target.role, target.pid, target.create_time) == ("server", sp.pid, sp.create_time)
        assert app.focused is not None and app.focused.id == "cancel"          # Cancel first, as everywhere
        assert "-carla-rpc-port=2000" in "".join(str(w.render()) for w in screen.query("*"))
        await pilot.press("tab", "tab")
        assert app.focused is not None and app.focused.id == "proceed"
        await pilot.press("enter")
        await until(pilot, lambda: bool(executed(b)) and app.screen.id == "main", "the restart")
        (call,) = executed(b)
        assert call[1:3] == ("restart-server", "A") and call[3].proceed and call[3].via == "tui"
        await until(pilot, lambda: any("stop-hung-server done" in ln for ln in log_lines(app)), "its audit line")


async def test_h_cancel_touches_nothing() -> None:
    b = RestartBackend()
    hung(b)
    app = ConsoleApp(b, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        await open_h(pilot, app)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.id == "main", "back on the main screen")
        assert not executed(b) and ("plan", "restart-server", "A") in b.calls


async def test_h_refuses_an_unknown_server_and_a_running_evaluator_with_the_reason() -> None:
    for kw, words in (({"server": State.UNKNOWN}, "UNKNOWN"), ({"evaluator": "ALIVE"}, "evaluator DEAD, but it is ALIVE")):
        b = RestartBackend()
        hung(b, **kw)   # type: ignore[arg-type]
        app = ConsoleApp(b, poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: ("start",) in b.calls, "the backend")
            screen = await open_h(pilot, app)
            proceed = screen.query_one("#proceed", Button)
            assert proceed.disabled, kw
            assert words in str(screen.query_one("#reason").render()), kw
            await pilot.click("#proceed")
            await pilot.pause(0.1)
            assert not executed(b), kw


async def test_h_is_not_bound_in_a_read_only_console() -> None:
    b = RestartBackend()
    hung(b)
    app = ConsoleApp(b, read_only=True, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        await pilot.press("h")
        await pilot.pause(0.2)
        assert app.screen.id == "main" and not any(c[0] == "plan" for c in b.calls)


# ----- the bell ---------------------------------------------------------------------------------------

UNKNOWN_WHY = "server UNKNOWN for 600 s: cannot measure it, nothing is stopped"


def needing_human(b: FakeBackend, side: str, supervisor: str = "needs-human", bell: bool = True,
                  why: str = UNKNOWN_WHY):
    cfg = b.rig.sides[side]
    cfg = replace(cfg, supervisor=SupervisorConfig(bell=bell))
    s = snapshot(cfg, evaluator="DEAD", phase="restarting")
    h = HarnessState(side, 5010, T0 - 900, 3, status="waiting", attempt=1, supervisor=supervisor,  # type: ignore[arg-type]
                     detail=why)
    return replace(s, evaluator=replace(s.evaluator, harness=h))


async def test_the_bell_rings_once_when_a_side_needs_a_human_and_can_be_turned_off() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)    # type: ignore[method-assign]   # the terminal's BEL, counted
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        app.show_snapshot(needing_human(b, "A", "watching"))
        assert rings == []
        app.show_snapshot(needing_human(b, "A"))
        assert rings == [1]
        app.show_snapshot(needing_human(b, "A"))            # still waiting for the human: no second ring
        assert rings == [1]
        app.show_snapshot(needing_human(b, "A", "watching"))
        app.show_snapshot(needing_human(b, "A"))            # asked again after it cleared: it rings again
        assert rings == [1, 1]
        app.show_snapshot(needing_human(b, "A", why="automatic recovery refused: evaluator UNKNOWN"))
        assert rings == [1, 1, 1]                           # still needs a human, for another cause
        # supervisor.bell: false — no ring, but the event log still says it (one line each time).
        app.show_snapshot(needing_human(b, "B", "watching", bell=False))
        app.show_snapshot(needing_human(b, "B", bell=False))
        assert rings == [1, 1, 1]
        await pilot.pause(0.1)
        said = [ln for ln in log_lines(app) if "needs a human" in ln]
        assert [ln.split()[1] for ln in said] == ["A", "A", "A", "B"], said
        assert "evaluator UNKNOWN" in said[2] and all(UNKNOWN_WHY in ln for i, ln in enumerate(said) if i != 2)


async def test_a_console_started_while_a_side_needs_a_human_rings_at_first_look() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)    # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        app.show_snapshot(needing_human(b, "A"))
        assert rings == [1]
        await pilot.pause(0.1)
        (first,) = [ln for ln in log_lines(app) if "first look" in ln]
        assert "needs a human" in first and "r, h, l act" in first


async def test_a_read_only_console_rings_too_and_offers_no_destructive_key() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, read_only=True, poll=False)
    rings: list[int] = []
    app.bell = lambda: rings.append(1)    # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: ("start",) in b.calls, "the backend")
        app.show_snapshot(needing_human(b, "A", "watching"))
        app.show_snapshot(needing_human(b, "A"))
        assert rings == [1]
        await pilot.pause(0.1)
        (line,) = [ln for ln in log_lines(app) if "needs a human" in ln]
        assert "(g re-probes)" in line and "r, h, l" not in line
