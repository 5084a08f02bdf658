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

from ops.actions.guard import Confirmation, Plan
from widgets.plan_view import PlanTargets, VerdictLines, disabled_reason

Reprobe = Callable[[], Awaitable[Plan]]
REPROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ConfirmResult:
    plan: Plan               # the plan the operator saw last (after any re-probe)
    confirmation: Confirmation


class ConfirmScreen(ModalScreen[ConfirmResult]):
    AUTO_FOCUS = "#cancel"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("n", "cancel", "Cancel", show=False),
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

    def __init__(self, plan: Plan, label: str, reprobe: Reprobe | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.label = label
        self.reprobe = reprobe
        self.probing = False
        self.probe_error: str | None = None   # a failed re-probe keeps Proceed disabled until one succeeds

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(id="confirm-title")
            yield PlanTargets(id="targets")
            yield VerdictLines(id="verdicts")
            yield Static(id="reason")
            yield Input(id="typed", placeholder=f"type the side name ({self.plan.side}) to proceed")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel", compact=True)
                yield Button("Re-probe", id="reprobe", disabled=self.reprobe is None, compact=True)
                yield Button("Proceed", id="proceed", variant="error", compact=True)

    def on_mount(self) -> None:
        self.app.post_message(self.Opened(self.plan.side))
        self._show()

    def on_unmount(self) -> None:
        self.app.post_message(self.Closed(self.plan.side))

    def _show(self) -> None:
        p = self.plan
        self.query_one("#confirm-title", Static).update(
            Text(f"{self.label} · side {p.side} · host {p.host}", style="bold"))
        self.query_one(PlanTargets).show(p)
        self.query_one(VerdictLines).show(p)
        self.query_one("#typed", Input).display = p.needs_typed
        self._refresh_proceed()

    def _why_not(self) -> str | None:
        if self.probing:
            return "re-probing…"
        if self.probe_error:
            return self.probe_error
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
        reason.update(Text.assemble(("Proceed disabled: ", "bold red"), why) if why else
                      Text("Proceed enabled: the guard re-checks each pid and start time first",
                           style="dim"))

    @on(Input.Changed, "#typed")
    def _typed(self) -> None:
        self._refresh_proceed()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(ConfirmResult(self.plan, Confirmation(False, "tui")))

    @on(Button.Pressed, "#proceed")
    def _proceed(self) -> None:
        if self._why_not() is not None:   # a disabled button cannot be pressed; a stray message cannot either
            return
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
            self.probe_error = f"re-probe failed: {type(e).__name__}: {e}"
        else:
            self.probe_error = None
        finally:
            self.probing = False
        self._show()
