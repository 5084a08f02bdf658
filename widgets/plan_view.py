"""A guard Plan as the operator must see it before saying yes: exact targets, verdicts, refusal."""
from __future__ import annotations

import re
import shlex
import time
from pathlib import PurePath

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ops.actions.guard import UNKNOWN, Plan
from widgets.words import keys_for_cli, word


def disabled_reason(plan: Plan) -> str | None:
    """Why Proceed must stay disabled, or None. UNKNOWN anywhere is a reason on its own (fail-closed),
    even if a plan builder forgot to refuse."""
    unknown = sorted(k for k, v in plan.verdicts.items() if v == UNKNOWN)
    if unknown:
        return f"{', '.join(unknown)} UNKNOWN: cannot measure, so nothing destructive proceeds"
    return plan.refused


# The tokens that tie a process to its side (design.md §1): shown first, so a narrow screen still shows them.
_VALUE_TOKENS = ("--port", "--traffic-manager-port", "--resume", "-n", "--name")
_EQ_TOKENS = ("-carla-rpc-port=", "-graphicsadapter=", "--port=", "--resume=")
_INTERPRETERS = re.compile(r"^(python[0-9.]*|env|bash|sh|nice|setsid|timeout|exec)$")


def identity(cmdline: tuple[str, ...] | None) -> str:
    """What identifies a target, most telling first: the program (not its interpreter), then the side's
    tokens (`--port N`, `-carla-rpc-port=N`, `--resume True`, a conda env), then the subcommand."""
    if not cmdline:
        return "<cmdline unreadable>"
    args = list(cmdline)
    i = 0
    while i < len(args) - 1 and _INTERPRETERS.match(PurePath(args[i]).name):
        i += 1
        while i < len(args) - 1 and args[i] in ("-u", "-m", "-X", "-B", "-E", "-s"):
            i += 1
    program = PurePath(args[i]).name or args[i]
    rest = args[i + 1:]
    tokens: list[str] = []
    j = 0
    while j < len(rest):
        a = rest[j]
        if a in _VALUE_TOKENS and j + 1 < len(rest):
            tokens.append(f"{a} {rest[j + 1]}")
            j += 2
            continue
        if a.startswith(_EQ_TOKENS):
            tokens.append(a)
        elif program in ("carla-console", "console") and a in ("harness", "launch") and j + 1 < len(rest):
            tokens.append(f"{a} {rest[j + 1]}")
        j += 1
    return " ".join([program, *tokens])


class PlanTargets(Static):
    """pid, role, what identifies it, start time and host of every target, outer → inner, in the plan's
    own order. The identity wraps rather than being cut: the full argv is one key away (v)."""

    def show(self, plan: Plan) -> None:
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False, header_style="bold")
        table.add_column("PID", no_wrap=True)
        table.add_column("ROLE", no_wrap=True)
        table.add_column("IDENTIFIED BY", ratio=1, overflow="fold")
        table.add_column("STARTED", no_wrap=True)
        table.add_column("HOST", no_wrap=True)
        for t in plan.targets:
            table.add_row(str(t.pid), t.role, identity(t.cmdline), _started(t.create_time), t.host)
        if not plan.targets:
            table.add_row("-", "-", "(no process is stopped)", "-", "-")
        self.table = table
        self.update(table)


def _started(create_time: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(create_time))


def argv_lines(plan: Plan) -> list[str]:
    """Every target's full argv, for the modal's `v` view."""
    out: list[str] = []
    for t in plan.targets:
        out.append(f"{t.role} pid {t.pid} on {t.host}, started {t.start_text()}:")
        out.append("  " + (shlex.join(t.cmdline) if t.cmdline is not None else "<cmdline unreadable>"))
    return out or ["(no process is stopped)"]


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
            t.append(f"\n  {keys_for_cli(str(ev))}", style="dim")
        if plan.action:
            t.append(f"\naction: {plan.action}")
        self.update(t)
