"""The recovery wizard: the guided-recovery steps of a hung side, each with a live status mark.

It walks: verdict → kill plan → confirm → kill and verify → server → relaunch → wait FRESH. Every
destructive step goes through the confirmation modal; Esc leaves at any step except while a kill is
being executed (cancelling a half-sent TERM/KILL sequence would leave a half-applied plan; the guard
finishes it and the wizard then stops). Marks are words in brackets so a 16-colour or text capture reads
the same as the colour screen.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.tui.protocol import RecoveryDriver, StepOutcome
from console.tui.screens.confirm import ConfirmResult, ConfirmScreen
from ops.actions.guard import Plan
from widgets.words import keys_for_cli

STEPS = ("verdict", "kill plan", "confirm", "kill and verify", "server", "relaunch", "wait FRESH")
MARKS = {
    "pending": ("[    ]", "dim"), "running": ("[ .. ]", "bold yellow"), "ok": ("[ ok ]", "bold green"),
    "failed": ("[FAIL]", "bold red"), "refused": ("[STOP]", "bold red"), "skipped": ("[SKIP]", "dim"),
    "cancelled": ("[STOP]", "yellow"),
}
STEP_TIMEOUT_S = 300.0


class StepRow(Static):
    """One step: its mark word, its name, its detail (the evidence of what was measured or done)."""

    def __init__(self, index: int, name: str) -> None:
        super().__init__(id=f"step-{index}", classes="step-row")
        self.step_name = name
        self.index = index
        self.set_status("pending", "")

    def set_status(self, status: str, detail: str) -> None:
        self.status = status
        mark, style = MARKS[status]
        t = Text.assemble((mark, style), f" {self.index + 1}. {self.step_name}")
        detail = keys_for_cli(detail)
        if detail:
            t.append(f"\n       {detail}", style="dim" if status in ("ok", "skipped") else "")
        self.update(t)


class RecoveryWizard(Screen[None]):
    BINDINGS = [Binding("escape", "leave", "Back")]

    def __init__(self, driver: RecoveryDriver) -> None:
        super().__init__(id="wizard")
        self.driver = driver
        self.side = driver.side
        self.busy_destructive = False
        self.finished = False

    def compose(self) -> ComposeResult:
        with Vertical(id="wizard-box"):
            yield Static(Text(f"Recovery of side {self.side}", style="bold"), id="wizard-title")
            with VerticalScroll(id="steps"):
                for i, name in enumerate(STEPS):
                    yield StepRow(i, name)
            yield Static(id="next-action")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.walk()

    def row(self, i: int) -> StepRow:
        return self.query_one(f"#step-{i}", StepRow)

    def next_action(self, text: str) -> None:
        self.query_one("#next-action", Static).update(Text.assemble(("next: ", "bold"), text))

    def action_leave(self) -> None:
        if self.busy_destructive:
            self.notify("a kill is being executed: the wizard stops after it", severity="warning")
            return
        self.workers.cancel_group(self, "walk")
        self.dismiss(None)

    def _stop(self, i: int, out: StepOutcome, why: str) -> None:
        self.row(i).set_status(out.status if out.status in MARKS else "failed", out.detail)
        for j in range(i + 1, len(STEPS)):
            self.row(j).set_status("skipped", "")
        hint = ""
        if STEPS[i] == "server" and out.status != "cancelled":
            hint = "; to start the server: Esc, then a (adapter polling), then l (launch)"
        elif STEPS[i] == "relaunch" and out.status != "cancelled":
            hint = "; Esc, then d shows the side's processes and attempts"
        self.next_action(f"{why}{hint} — Esc steps back, q quits")
        self.finished = True

    async def _step(self, i: int, coro) -> StepOutcome:
        self.row(i).set_status("running", "")
        try:
            return await asyncio.wait_for(coro, STEP_TIMEOUT_S)
        except asyncio.TimeoutError:
            return StepOutcome("failed", f"no answer within {STEP_TIMEOUT_S:.0f} s (UNKNOWN)")
        except Exception as e:  # a broken step must show its error, not kill the app
            return StepOutcome("failed", f"{type(e).__name__}: {e}")

    async def _confirm(self, plan: Plan, label: str, step: Callable[[], Awaitable[StepOutcome]]) -> ConfirmResult:
        async def reprobe() -> Plan:
            out = await step()
            if out.plan is None:
                raise RuntimeError(out.detail or "no plan")
            return out.plan
        return await self.app.push_screen_wait(ConfirmScreen(plan, label, reprobe=reprobe))

    async def _confirmed_step(self, i: int, out: StepOutcome, label: str,
                              step: Callable[[], Awaitable[StepOutcome]]) -> bool:
        """A step that answered 'confirm': the modal, then the guard executes it."""
        if out.status != "confirm" or out.plan is None:
            if out.status in ("ok", "skipped"):
                self.row(i).set_status(out.status, out.detail)
                return True
            self._stop(i, out, f"{STEPS[i]} did not pass")
            return False
        self.row(i).set_status("running", f"waiting for confirmation: {out.detail}")
        res = await self._confirm(out.plan, label, step)
        if not res.confirmation.proceed or res.plan is None:
            self._stop(i, StepOutcome("cancelled", "cancelled in the confirmation"), "cancelled")
            return False
        self.busy_destructive = True
        try:
            done = await self._step(i, self.driver.execute(res.plan, res.confirmation))
        finally:
            self.busy_destructive = False
        if done.status != "ok":
            self._stop(i, done, f"{STEPS[i]} failed")
            return False
        self.row(i).set_status("ok", done.detail)
        return True

    @work(group="walk", exclusive=True, exit_on_error=False)
    async def walk(self) -> None:
        self.next_action("measuring the verdict…")
        v = await self._step(0, self.driver.verdict())
        if v.status != "ok" or v.plan is None:
            self._stop(0, v if v.status != "ok" else StepOutcome("refused", v.detail or "no kill plan"),
                       "recovery refused: nothing was touched")
            return
        self.row(0).set_status("ok", v.detail)
        plan = v.plan
        targets = ", ".join(f"{t.role} {t.pid}" for t in plan.targets) or "none"
        if plan.refused:
            self._stop(1, StepOutcome("refused", f"{targets}; refused: {plan.refused}"), "the plan is refused")
            return
        self.row(1).set_status("ok", f"outer → inner: {targets}")
        self.next_action("confirm the kill plan (Cancel is focused; Tab to Proceed)")
        self.row(2).set_status("running", "")
        res = await self._confirm(plan, "stop the hung chain", self.driver.verdict)
        if not res.confirmation.proceed or res.plan is None:
            self._stop(2, StepOutcome("cancelled", "cancelled: nothing was touched"), "cancelled")
            return
        self.row(2).set_status("ok", f"confirmed via {res.confirmation.via}")
        self.next_action("stopping the chain (TERM, grace, KILL, verify)…")
        self.busy_destructive = True
        try:
            k = await self._step(3, self.driver.kill(res.plan, res.confirmation))
        finally:
            self.busy_destructive = False
        if k.status != "ok":
            self._stop(3, k, "the kill did not verify")
            return
        self.row(3).set_status("ok", k.detail)
        self.next_action("checking the server…")
        if not await self._confirmed_step(4, await self._step(4, self.driver.server()), "restart the server",
                                          self.driver.server):
            return
        self.next_action("relaunch under the resume rule: confirm it (Cancel is focused; Tab to Proceed)")
        if not await self._confirmed_step(5, await self._step(5, self.driver.relaunch()), "relaunch",
                                          self.driver.relaunch):
            return
        self.next_action("waiting for a FRESH heartbeat…")
        row = self.row(6)
        f = await self._step(6, self.driver.wait_fresh(lambda text: row.set_status("running", text)))
        if f.status != "ok":
            self._stop(6, f, "the heartbeat did not come back")
            return
        row.set_status("ok", f.detail)
        self.finished = True
        self.next_action("recovered: heartbeat FRESH — Esc returns to the sides")
