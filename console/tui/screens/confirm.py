"""The three-state confirmation modal every destructive action passes through.

k9s style: Cancel has the focus, Esc and `n` cancel, nothing is one keystroke away from a kill. The
modal only collects the operator's word; the guard re-verifies every identity after Proceed and refuses
on its own if anything changed, so this screen is a second gate, not the only one.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from console.tui.protocol import Unavailable
from console.tui.screens.report import ReportScreen
from ops.actions.guard import Confirmation, Plan
from widgets.plan_view import PlanTargets, VerdictLines, argv_lines, disabled_reason
from widgets.words import keys_for_cli

Reprobe = Callable[[], Awaitable[Plan]]
REPROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ConfirmResult:
    plan: Plan | None        # the plan the operator saw last (after any re-probe); None: none was built
    confirmation: Confirmation


class ConfirmScreen(ModalScreen[ConfirmResult]):
    AUTO_FOCUS = "#cancel"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("n", "cancel", "Cancel", show=False),
        Binding("v", "argv", "Full argv"),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    class Opened(Message):
        """Posted to the app: pause this side's polling while the operator reads the plan."""

        def __init__(self, side: str) -> None:
            super().__init__()
            self.side = side

    class Closed(Opened):
        """Posted to the app: the modal is gone, polling may resume."""

    def __init__(self, plan: Plan | None, label: str, reprobe: Reprobe | None = None, *, side: str = "",
                 checking: str = "") -> None:
        """plan None: the modal opens at once, says what is being checked (`checking`), and builds the plan
        with `reprobe`; a slow or hung host then shows on screen instead of a silent wait."""
        super().__init__()
        self.plan = plan
        self.side = plan.side if plan is not None else side
        self.label = label
        self.reprobe = reprobe
        self.checking = checking
        self.probing = plan is None
        self.probe_error: str | None = None   # a failed re-probe keeps Proceed disabled until one succeeds

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(id="confirm-title")
            yield PlanTargets(id="targets")
            yield VerdictLines(id="verdicts")
            yield Static(id="reason")
            yield Input(id="typed", placeholder=f"type the side name ({self.side}) to proceed")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel", compact=True)
                yield Button("Re-probe", id="reprobe", disabled=self.reprobe is None, compact=True)
                yield Button("Proceed", id="proceed", variant="error", compact=True)

    def on_mount(self) -> None:
        self.app.post_message(self.Opened(self.side))
        self._show()
        if self.plan is None:
            self.run_reprobe()

    def on_unmount(self) -> None:
        self.app.post_message(self.Closed(self.side))

    def _show(self) -> None:
        p = self.plan
        if p is None:
            self.query_one("#confirm-title", Static).update(Text(f"{self.label} · side {self.side}", style="bold"))
            self.query_one(PlanTargets).update(Text(
                f"checking: {self.checking or 'probing the side'}…" if self.probe_error is None
                else "no plan: nothing will be touched", style="dim"))
            self.query_one("#typed", Input).display = False
            self._refresh_proceed()
            return
        self.query_one("#confirm-title", Static).update(Text.assemble(
            (f"{self.label} · side {p.side} · host {p.host}", "bold"), ("   v: full argv", "dim")))
        self.query_one(PlanTargets).show(p)
        self.query_one(VerdictLines).show(p)
        self.query_one("#typed", Input).display = p.needs_typed
        self._refresh_proceed()

    def _why_not(self) -> str | None:
        if self.probing:
            return "probing…" if self.plan is None else "re-probing…"
        if self.probe_error:
            return self.probe_error
        if self.plan is None:
            return "no plan yet"
        reason = disabled_reason(self.plan)
        if reason:
            return reason
        if self.plan.needs_typed and self.query_one("#typed", Input).value != self.plan.side:
            return f"the server has a client: type the side name ({self.plan.side}) to proceed"
        return None

    def _refresh_proceed(self) -> None:
        why = self._why_not()
        self.query_one("#proceed", Button).disabled = why is not None
        reason = self.query_one("#reason", Static)
        reason.update(Text.assemble(("Proceed disabled: ", "bold red"), keys_for_cli(why)) if why else
                      Text("Proceed enabled: the guard re-checks each pid and start time first",
                           style="dim"))

    @on(Input.Changed, "#typed")
    def _typed(self) -> None:
        self._refresh_proceed()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "reprobe")
        self.dismiss(ConfirmResult(self.plan, Confirmation(False, "tui")))

    def action_argv(self) -> None:
        if self.plan is not None:
            self.app.push_screen(ReportScreen(f"Full argv · {self.label} · side {self.side}", argv_lines(self.plan)))

    @on(Button.Pressed, "#proceed")
    def _proceed(self) -> None:
        if self._why_not() is not None or self.plan is None:   # a disabled button cannot be pressed; a stray
            return                                              # message cannot either
        typed = self.query_one("#typed", Input).value if self.plan.needs_typed else self.plan.side
        self.dismiss(ConfirmResult(self.plan, Confirmation(True, "tui", typed=typed)))

    @on(Button.Pressed, "#reprobe")
    def _reprobe_pressed(self) -> None:
        self.run_reprobe()

    @work(exclusive=True, group="reprobe", exit_on_error=False)
    async def run_reprobe(self) -> None:
        if self.reprobe is None:
            return
        self.probing = True
        self._refresh_proceed()
        try:
            self.plan = await asyncio.wait_for(self.reprobe(), REPROBE_TIMEOUT_S)
        except Exception as e:  # a failed re-probe leaves Proceed disabled with the error: fail-closed
            if isinstance(e, Unavailable) and self.plan is None:
                # The operation does not exist here: the app said so; there is nothing to show.
                self.dismiss(ConfirmResult(None, Confirmation(False, "tui")))
                return
            what = "probe" if self.plan is None else "re-probe"
            self.probe_error = f"{what} failed: {type(e).__name__}: {e}"
        else:
            self.probe_error = None
        finally:
            self.probing = False
        self._show()
