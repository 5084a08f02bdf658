"""`i` / Enter: one side in full — every process of it with its whole argv, the harness's attempts with
their exit codes, and the log's last 50 lines. Read-only: nothing here acts. Esc steps back."""
from __future__ import annotations

import asyncio
import shlex
import time

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ops.platform.procs import Proc
from ops.probes.prober import SideSnapshot
from widgets.side_parts import printable
from widgets.words import word

LOG_LINES = 50
LOG_TIMEOUT_S = 15.0


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def processes(s: SideSnapshot) -> Table:
    table = Table(box=None, padding=(0, 1), expand=True, title="Processes (outer → inner)",
                  title_justify="left", title_style="bold")
    table.add_column("ROLE", no_wrap=True)
    table.add_column("PID", no_wrap=True)
    table.add_column("HOST", no_wrap=True)
    table.add_column("ARGV", ratio=1, overflow="fold")
    rows: list[tuple[str, Proc, str]] = [(m.role, m.proc, s.side.evaluator.host) for m in s.evaluator.chain.members]
    rows += [("server", p, s.side.server.host) for p in s.server.procs]
    for role, p, host in rows:
        argv = shlex.join(p.cmdline) if p.cmdline is not None else "<cmdline unreadable>"
        table.add_row(role, str(p.pid), host, argv)
    if not rows:
        table.add_row("-", "-", "-", "no process of this side")
    return table


def attempts(s: SideSnapshot) -> Table:
    h = s.evaluator.harness
    title = "Attempts" if h is None else f"Attempts (harness pid {h.pid}: {h.status}{': ' + h.detail if h.detail else ''})"
    table = Table(box=None, padding=(0, 1), expand=True, title=title, title_justify="left", title_style="bold")
    for col in ("#", "STARTED", "ENDED", "EXIT", "RESUME", "EVALUATOR PID"):
        table.add_column(col, no_wrap=True)
    for a in (h.attempts if h is not None else []):
        exit_text = word("-") if a.exit_code is None else word(str(a.exit_code), "green" if a.exit_code == 0 else "bold red")
        table.add_row(str(a.n), _when(a.started), _when(a.ended), exit_text, "yes" if a.resume else "no",
                      str(a.evaluator_pid or "-"))
    if h is None or not h.attempts:
        table.add_row("-", "-", "-", "-", "-", "no attempt recorded")
    return table


class DetailScreen(Screen[None]):
    BINDINGS = [Binding("escape", "back", "Back"), Binding("g", "refresh_log", "Re-read log")]

    def __init__(self, snap: SideSnapshot) -> None:
        super().__init__()
        self.snap = snap

    def compose(self) -> ComposeResult:
        s = self.snap
        with VerticalScroll(id="detail-box"):
            last = f" · last route {s.evaluator.last_status}" if s.evaluator.last_status else ""
            ds = f" · DS {s.evaluator.ds:.1f}" if s.evaluator.ds is not None else ""
            yield Static(Text(f"Side {s.name} · server {s.side.server.host} · evaluator {s.side.evaluator.host}"
                              f"{ds}{last}", style="bold"), id="detail-title")
            self.body = Group(processes(s), Text(""), attempts(s))
            yield Static(self.body, id="detail-procs")
            yield Static(Text(f"Log (last {LOG_LINES} lines of {s.side.evaluator.log}): reading…", style="dim"),
                         id="detail-log")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.read_log()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_refresh_log(self) -> None:
        self.read_log()

    @work(exclusive=True, group="log", exit_on_error=False)
    async def read_log(self) -> None:
        s = self.snap
        head = Text(f"Log (last {LOG_LINES} lines of {s.side.evaluator.log})", style="bold")
        try:
            lines = await asyncio.wait_for(self.app.backend.log_lines(s.name, LOG_LINES),  # type: ignore[attr-defined]
                                           LOG_TIMEOUT_S)
        except Exception as e:  # an unreadable log is said, never a crash of the view
            body = Text(f"UNKNOWN: cannot read it: {type(e).__name__}: {e}", style="yellow")
        else:
            body = (Text("UNKNOWN: cannot read it", style="yellow") if lines is None else
                    Text("\n".join(printable(ln.rstrip()) for ln in lines) or "(empty)"))
        self.query_one("#detail-log", Static).update(Group(head, body))
