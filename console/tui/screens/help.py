"""`?`: the keys and what the state words mean (the words carry the meaning, colours only help)."""
from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from widgets.words import word

# Short enough that keys and words fit 80x24 whole, one row each (tests/tui snapshot test_help_80x24).
KEYS = [
    ("tab / arrows", "select a side", False),
    ("i / enter", "details: every process's argv, the log, the attempts", False),
    ("g", "re-probe the selected side now (carla RPC included)", False),
    ("p", "port scan: winNAT exclusions, ports in use, shared", False),
    ("a", "adapter polling: try each GPU until VRAM rises", True),
    ("l", "launch the side's harness (resume rule, backup)", True),
    ("r", "guided recovery of a hung side (wizard)", True),
    ("x", "reclaim: stop an IDLE side's server", True),
    ("h", "restart a HUNG (or DEAD) server: its exact pids, then adapter polling", True),
    ("d", "results: per-route table, DS/SR, abilities, ETA (n: the rig)", False),
    ("ctrl+p", "command palette (v in a confirmation: full argv)", False),
    ("esc / q", "back one screen / quit, from any screen (runs go on)", False),
]
WORDS = [
    ("ALIVE / DEAD", "measured present / measured absent"),
    ("UNKNOWN", "not measurable: blocks every destructive step"),
    ("FRESH / STALE", "log moved within stall_s / quiet longer: hung?"),
    ("NOT_STARTED", "no log file yet"),
    ("IDLE", "server ALIVE, no evaluator: renders for nobody"),
    ("starting / restarting", "harness up: before its first / between attempts"),
    ("finished", "all routes done: nothing left to launch"),
    ("ok / IN USE / RESERVED", "port state, last scan (SHARED: two sides)"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark", "close", "Back")]

    def __init__(self, read_only: bool) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        keys = Table(box=None, padding=(0, 1), show_header=False, expand=True, title="Keys",
                     title_justify="left", title_style="bold")
        keys.add_column(no_wrap=True)
        keys.add_column(ratio=1)
        for key, what, destructive in KEYS:
            if destructive and self.read_only:
                continue
            keys.add_row(key, what)
        if self.read_only:
            keys.add_row("", Text("(read-only: a, l, r, x are not bound)", style="dim"))
        words = Table(box=None, padding=(0, 1), show_header=False, expand=True, title="State words",
                      title_justify="left", title_style="bold")
        words.add_column(no_wrap=True)
        words.add_column(ratio=1)
        for w, what in WORDS:
            cell = Text()
            for i, part in enumerate(w.split(" / ")):
                if i:
                    cell.append(" / ")
                cell.append_text(word(part))
            words.add_row(cell, what)
        self.body = Group(keys, words)
        with VerticalScroll(id="help-box"):
            yield Static(self.body)

    def plain_text(self, width: int = 100) -> str:
        """The help as text (for tests and for a capture)."""
        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        console.print(self.body)
        return console.export_text()

    def action_close(self) -> None:
        self.dismiss(None)
