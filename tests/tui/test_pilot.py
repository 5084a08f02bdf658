"""Pilot tests: every binding, the modal's Cancel / Re-probe / Proceed paths, polling rules."""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace

import pytest
from textual.widgets import Button, Input

from console.tui import app as app_mod
from console.tui.app import ConsoleApp
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.help import HelpScreen
from console.tui.screens.main import DESTRUCTIVE_ACTIONS
from console.tui.screens.report import ReportScreen
from console.tui.screens.wizard import RecoveryWizard
from tests.tui.fakes import FakeBackend, FakeRecovery, kill_plan, polls_up, stale, until, with_unknown_evaluator
from widgets.event_log import EventLog
from widgets.side_pane import SidePane
from widgets.side_parts import PortsLine


def backend_with_plans() -> FakeBackend:
    b = FakeBackend()
    stale(b)
    for action in ("reclaim", "adapter", "launch"):
        b.plans[action] = lambda side, b=b: kill_plan(b.snaps[side])
    return b


def executed(b: FakeBackend) -> list[tuple]:
    return [c for c in b.calls if c[0] == "execute"]


def notes(app: ConsoleApp) -> list[str]:
    """The event log's lines, as text."""
    return [strip.text for strip in app.main.query_one(EventLog).lines]


async def settle(pilot, t: float = 0.2) -> None:
    await pilot.pause(t)


# ----- bindings ----------------------------------------------------------------------------------------

async def test_destructive_bindings_exist_and_read_only_removes_them() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        keys = {b.binding.action for b in app.screen.active_bindings.values()}
        assert DESTRUCTIVE_ACTIONS <= keys
    b = FakeBackend()
    ro = ConsoleApp(b, read_only=True, poll=False)
    async with ro.run_test() as pilot:
        await settle(pilot)
        keys = {x.binding.action for x in ro.screen.active_bindings.values()}
        assert not (DESTRUCTIVE_ACTIONS & keys)
        for key in "alrx":
            await pilot.press(key)
        await settle(pilot)
        assert not [c for c in b.calls if c[0] == "plan"]
        assert ro.screen.id == "main"
        commands = {c.title for c in ro.get_system_commands(ro.screen)}
        assert not commands & {"Adapter polling", "Launch", "Recover", "Reclaim"}


async def test_g_reprobes_the_selected_side_with_rpc() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await polls_up(app, pilot)
        await pilot.press("g")
        await until(pilot, lambda: ("probe", "A", True) in b.calls and app.main.pane("A").snap is b.snaps["A"],
                    "A probed with rpc and shown")


async def test_tab_and_arrows_select_a_side() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        assert app.main.selected == "A"
        await pilot.press("tab")
        assert app.main.selected == "B" and isinstance(app.focused, SidePane)
        await pilot.press("tab")
        assert app.main.selected == "A"
        await pilot.press("down")
        assert app.main.selected == "B"
        await pilot.press("up")
        assert app.main.selected == "A"
        await pilot.press("right", "left", "shift+tab")
        assert app.main.selected == "B"


async def test_a_key_right_after_tab_acts_on_the_side_tab_moved_to() -> None:
    """The selection moves with the Tab itself, not when the pane's focus message is handled: a tmux run
    (a loaded machine) pressed `l` right after Tab and got side A's launch plan with B's pane focused."""
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        app.main.action_select(1)            # what Tab runs; no message handled between it and the next key
        assert app.main.selected == "B"
        app.main.action_select(-1)
        assert app.main.selected == "A"
        await pilot.pause()
        assert app.main.selected == "A" and app.focused is app.main.pane("A")


async def test_p_scans_ports_and_panes_show_the_words() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot, 0.3)
        assert isinstance(app.screen, ReportScreen)
        assert app.main.pane("A").part(PortsLine).status[2001] == "RESERVED"
        await pilot.press("escape")
        assert app.screen.id == "main"


async def test_question_mark_shows_help_and_escape_closes() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert app.screen.id == "main"


async def test_help_is_built_once_and_opens_again() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        first = app.screen
        app.show_help()                 # the palette's Help while the help is open: no second copy
        await settle(pilot)
        assert sum(isinstance(s, HelpScreen) for s in app.screen_stack) == 1
        await pilot.press("question_mark")
        assert app.screen.id == "main"
        await pilot.press("question_mark")
        assert app.screen is first      # the kept screen, not a new one
        assert "quit, from any screen" in first.plain_text()
        await pilot.press("escape")
        assert app.screen.id == "main"


async def test_command_palette_opens() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert type(app.screen).__name__ == "CommandPalette"
        titles = {c.title for c in app.get_system_commands(app.main)}
        assert {"Re-probe", "Port scan", "Adapter polling", "Launch", "Recover", "Reclaim"} <= titles


async def test_q_quits_and_closes_the_backend() -> None:
    b = FakeBackend()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
    assert not app.is_running
    assert app.return_code in (0, None)     # None: run_test() does not set it; the real run returns 0
    assert ("close",) in b.calls


@pytest.mark.parametrize("key,action", [("a", "adapter"), ("l", "launch"), ("x", "reclaim"), ("r", "recover")])
async def test_missing_operation_says_not_available(key: str, action: str) -> None:
    b = FakeBackend()   # no plans, no recovery driver: every operation is "not landed"
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert any(f"{action}: not available yet" in m for m in notes(app)), notes(app)
        assert app.screen.id == "main"


# ----- the confirmation modal --------------------------------------------------------------------------

@pytest.mark.parametrize("key,action", [("a", "adapter"), ("l", "launch"), ("x", "reclaim")])
async def test_modal_opens_with_cancel_focused_for_each_destructive_key(key: str, action: str) -> None:
    b = backend_with_plans()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused.id == "cancel"
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen.id == "main" and not executed(b)
        assert ("plan", action, "A") in b.calls


@pytest.mark.parametrize("keys", [("escape",), ("n",), ("enter",)])
async def test_modal_cancel_paths_touch_nothing(keys: tuple[str, ...]) -> None:
    b = backend_with_plans()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        await pilot.press(*keys)      # enter presses the focused button: Cancel
        await settle(pilot)
        assert app.screen.id == "main"
        assert not executed(b)


async def test_modal_proceed_hands_the_confirmation_to_the_backend() -> None:
    b = backend_with_plans()
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        await pilot.press("tab", "tab")
        assert app.focused.id == "proceed"
        await pilot.press("enter")
        await settle(pilot, 0.3)
        (call,) = executed(b)
        assert call[1:3] == ("reclaim", "A")
        conf = call[3]
        assert conf.proceed and conf.via == "tui" and conf.typed == "A"
        assert app.screen.id == "main"


async def test_proceed_disabled_on_unknown_with_the_reason() -> None:
    b = backend_with_plans()
    b.plans["reclaim"] = lambda side: with_unknown_evaluator(kill_plan(b.snaps[side]))
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ConfirmScreen)
        proceed = screen.query_one("#proceed", Button)
        assert proceed.disabled
        assert "UNKNOWN" in str(screen.query_one("#reason").render())
        await pilot.click("#proceed")
        screen._proceed()             # even a stray press message cannot proceed
        await settle(pilot)
        assert not executed(b)


async def test_reprobe_replans_and_can_enable_proceed() -> None:
    b = backend_with_plans()
    answers = [with_unknown_evaluator(kill_plan(b.snaps["A"])), kill_plan(b.snaps["A"])]
    b.plans["reclaim"] = lambda side: answers.pop(0)
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        screen = app.screen
        assert screen.query_one("#proceed", Button).disabled
        await pilot.press("tab", "enter")       # focus Re-probe, press it
        await settle(pilot, 0.3)
        assert [c for c in b.calls if c[:2] == ("plan", "reclaim")].__len__() == 2
        assert not screen.query_one("#proceed", Button).disabled
        assert app.screen is screen             # re-probe never closes the modal
        assert not executed(b)


async def test_typed_side_name_needed_to_stop_a_server_with_a_client() -> None:
    b = backend_with_plans()
    b.plans["reclaim"] = lambda side: replace(kill_plan(b.snaps[side]), needs_typed=True)
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        screen = app.screen
        proceed = screen.query_one("#proceed", Button)
        assert proceed.disabled and screen.query_one("#typed", Input).display
        screen.query_one("#typed", Input).focus()
        await pilot.press("B")
        assert proceed.disabled
        await pilot.press("backspace", "A")
        await settle(pilot)
        assert not proceed.disabled
        await pilot.click("#proceed")
        await settle(pilot, 0.3)
        (call,) = executed(b)
        assert call[3].typed == "A"


# ----- polling -----------------------------------------------------------------------------------------

class CountingBackend(FakeBackend):
    """Counts probes per side and the most that ever ran at once."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.delay = 0.15

    async def probe(self, side, rpc=None):
        self.running[side] = self.running.get(side, 0) + 1
        self.peak[side] = max(self.peak.get(side, 0), self.running[side])
        try:
            await asyncio.sleep(self.delay)
            return await super().probe(side, rpc)
        finally:
            self.running[side] -= 1


def probes(b: FakeBackend, side: str) -> int:
    return sum(1 for c in b.calls if c[:2] == ("probe", side))


async def test_polls_never_overlap_even_when_reprobe_is_hammered() -> None:
    b = CountingBackend()
    app = ConsoleApp(b, poll_s=0.05)
    async with app.run_test() as pilot:
        await settle(pilot, 0.3)
        for _ in range(6):
            await pilot.press("g")
        await settle(pilot, 0.6)
        assert probes(b, "A") >= 3
        assert b.peak == {"A": 1, "B": 1}


class QuietBBackend(FakeBackend):
    """Side B is served and has nothing to read on any beat but every fourth (LiveBackend.quiet_beat)."""

    def quiet_beat(self, side: str, beat: int) -> bool:
        return side == "B" and beat % 4 != 0


async def test_a_side_loop_sleeps_past_its_quiet_beats_and_g_still_polls_it() -> None:
    b = QuietBBackend()
    app = ConsoleApp(b, poll_s=0.05)
    async with app.run_test() as pilot:
        for _ in range(200):   # a condition, not a fixed sleep: the machine may be loaded
            if probes(b, "A") >= 13:
                break
            await settle(pilot, 0.05)
        a, bq = probes(b, "A"), probes(b, "B")
        # A polls every beat; B on its first look and then on every fourth beat only (a slow machine may
        # fold A's beats, never add B's).
        assert a >= 13 and 2 <= bq <= 1 + -(-a // 4) + 1, (a, bq)
        await pilot.press("tab")   # B's pane: `g` polls it now, quiet beat or not
        before = probes(b, "B")
        await pilot.press("g")
        await settle(pilot)
        assert ("probe", "B", True) in b.calls and probes(b, "B") > before


async def test_polling_of_a_side_pauses_under_its_modal() -> None:
    b = backend_with_plans()
    app = ConsoleApp(b, poll_s=0.05)
    async with app.run_test() as pilot:
        await settle(pilot, 0.3)
        await pilot.press("x")
        await settle(pilot, 0.3)
        assert isinstance(app.screen, ConfirmScreen)
        a0, b0 = probes(b, "A"), probes(b, "B")
        await settle(pilot, 0.6)
        assert probes(b, "A") == a0          # the pane under the modal holds still
        assert probes(b, "B") > b0           # the other side keeps polling
        await pilot.press("escape")
        await settle(pilot, 0.4)
        assert probes(b, "A") > a0           # and A resumes once the modal is gone


async def test_a_hung_host_greys_only_its_own_pane() -> None:
    b = FakeBackend()
    b.hang = {"B"}
    app = ConsoleApp(b, poll_s=0.1)
    app.poll_timeout = lambda side: 0.5   # type: ignore[method-assign]
    async with app.run_test() as pilot:
        for _ in range(100):   # a condition, not a fixed sleep: the machine may be loaded
            if app.main.pane("B").has_class("-greyed"):
                break
            await settle(pilot)
        assert app.main.pane("B").has_class("-greyed")
        assert "timed out" in (app.main.pane("B").greyed or "")
        assert not app.main.pane("A").has_class("-greyed")
        assert app.main.pane("A").snap is b.snaps["A"]
        await pilot.press("g")              # keys stay live while B hangs
        await settle(pilot)
        assert ("probe", "A", True) in b.calls


class SlowBBackend(FakeBackend):
    """B's probe takes longer than A's, as a remote side does: 20 ms, or until the test opens `gate`
    (a loaded machine may take longer than any fixed delay to look at A in between)."""

    gate: asyncio.Event | None = None

    async def probe(self, side: str, rpc: bool | None = None):
        if side == "B":
            if self.gate is not None:
                await self.gate.wait()
            else:
                await asyncio.sleep(0.02)
        return await super().probe(side, rpc)


async def test_the_sides_of_a_beat_are_shown_together(monkeypatch) -> None:
    # The hold is what lets A wait for B; what is tested is that they are then shown in one batch, not how
    # long the hold is: a long one keeps a loaded machine's scheduling out of the result.
    monkeypatch.setattr(app_mod, "SHOW_HOLD_S", 30.0)
    app = ConsoleApp(SlowBBackend(), poll=False)
    shown: list[tuple[str, bool]] = []
    batches = [0]   # batch_update()s open now
    orig, orig_batch = app.show_snapshot, app.batch_update

    def spy(snap) -> None:
        shown.append((snap.name, batches[0] > 0))
        orig(snap)

    @contextlib.contextmanager
    def batch_spy():
        batches[0] += 1
        try:
            with orig_batch():
                yield
        finally:
            batches[0] -= 1
    app.show_snapshot = spy   # type: ignore[method-assign]
    app.batch_update = batch_spy   # type: ignore[method-assign]
    async with app.run_test() as pilot:
        for _ in range(200):   # conditions, not fixed sleeps: the backend opened, its poll loops are up
            if set(app._poll_wake) == set(app.sides):
                break
            await settle(pilot, 0.05)
        gate = app.backend.gate = asyncio.Event()
        for side in app.sides:
            app._start_poll(side, None)
        deadline = time.monotonic() + 30
        while ("probe", "A", None) not in app.backend.calls and time.monotonic() < deadline:
            await pilot.pause(0.001)
        assert ("probe", "A", None) in app.backend.calls and app.main.pane("A").snap is None   # A held for B
        gate.set()
        while len(shown) < 2 and time.monotonic() < deadline:
            await pilot.pause(0.01)
        assert shown == [("A", True), ("B", True)]     # one batch: one compositor pass


async def test_a_hung_side_holds_the_others_back_no_longer_than_the_hold() -> None:
    b = FakeBackend()
    b.hang = {"B"}
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        for _ in range(200):   # conditions, not fixed sleeps: the backend opened, its poll loops are up
            if set(app._poll_wake) == set(app.sides):
                break
            await settle(pilot, 0.05)
        for side in app.sides:
            app._start_poll(side, None)
        deadline = time.monotonic() + 30   # B never answers: A is shown once the hold (SHOW_HOLD_S) is over
        while app.main.pane("A").snap is not b.snaps["A"] and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.main.pane("A").snap is b.snaps["A"]


# ----- the recovery wizard -----------------------------------------------------------------------------

async def test_wizard_walks_every_step_to_fresh() -> None:
    b = backend_with_plans()
    b.recovery_driver = rec = FakeRecovery(b)
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot, 0.3)
        assert isinstance(app.screen, ConfirmScreen) and app.focused.id == "cancel"
        await pilot.press("tab", "tab", "enter")
        await settle(pilot, 0.5)
        wizard = app.screen
        assert isinstance(wizard, RecoveryWizard) and wizard.finished
        assert [wizard.row(i).status for i in range(7)] == ["ok"] * 7
        assert rec.calls == ["verdict", "kill", "server", "relaunch", "wait_fresh"]
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen.id == "main"


async def test_wizard_cancel_in_the_modal_kills_nothing() -> None:
    b = backend_with_plans()
    b.recovery_driver = rec = FakeRecovery(b)
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot, 0.3)
        await pilot.press("escape")       # cancels the modal, not the wizard
        await settle(pilot)
        wizard = app.screen
        assert isinstance(wizard, RecoveryWizard)
        assert wizard.row(2).status == "cancelled"
        assert "kill" not in rec.calls
        await pilot.press("escape")
        assert app.screen.id == "main"


async def test_wizard_refuses_on_a_fresh_side_and_escape_leaves_midway() -> None:
    b = FakeBackend()                    # side A FRESH: the kill plan is refused
    b.recovery_driver = rec = FakeRecovery(b)
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot, 0.3)
        wizard = app.screen
        assert isinstance(wizard, RecoveryWizard)
        assert wizard.row(0).status == "refused" and wizard.row(3).status == "skipped"
        assert rec.calls == ["verdict"]
        await pilot.press("escape")
        assert app.screen.id == "main"
    b2 = backend_with_plans()
    b2.recovery_driver = FakeRecovery(b2, gate=asyncio.Event())
    app2 = ConsoleApp(b2, poll=False)
    async with app2.run_test() as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot, 0.3)
        await pilot.press("tab", "tab", "enter")
        await settle(pilot, 0.3)
        wizard = app2.screen
        assert wizard.row(6).status == "running"     # blocked in wait FRESH
        await pilot.press("escape")
        await settle(pilot)
        assert app2.screen.id == "main"
