"""A guard Plan as the operator must see it before saying yes: exact targets, verdicts, refusal."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable, Static

from ops.actions.guard import UNKNOWN, Plan
from widgets.words import word


def disabled_reason(plan: Plan) -> str | None:
    """Why Proceed must stay disabled, or None. UNKNOWN anywhere is a reason on its own (fail-closed),
    even if a plan builder forgot to refuse."""
    unknown = sorted(k for k, v in plan.verdicts.items() if v == UNKNOWN)
    if unknown:
        return f"{', '.join(unknown)} UNKNOWN: cannot measure, so nothing destructive proceeds"
    return plan.refused


class PlanTargets(DataTable, can_focus=False):
    """pid, start time, role, cmdline of every target, outer → inner, in the plan's own order.

    Not focusable: Tab in the modal must walk Cancel → Re-probe → Proceed and nothing else, the same in
    every modal, so an operator's fingers learn one sequence."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        self.add_columns("PID", "STARTED", "ROLE", "HOST", "CMDLINE")

    def show(self, plan: Plan) -> None:
        self.clear()
        for t in plan.targets:
            cmd = " ".join(t.cmdline) if t.cmdline is not None else "<cmdline unreadable>"
            self.add_row(str(t.pid), t.start_text(), t.role, t.host, cmd[:200])
        if not plan.targets:
            self.add_row("-", "-", "-", "-", "(no process is stopped)")


class VerdictLines(Static):
    """`server ALIVE · heartbeat STALE · evaluator ALIVE`, then the evidence lines and the action."""

    def show(self, plan: Plan) -> None:
        t = Text()
        for i, (name, value) in enumerate(plan.verdicts.items()):
            if i:
                t.append(" · ")
            t.append(f"{name} ")
            t.append_text(word(value))
        for ev in plan.evidence:
            t.append(f"\n  {ev}", style="dim")
        if plan.action:
            t.append(f"\naction: {plan.action}")
        self.update(t)
