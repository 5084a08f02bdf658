"""`?`: the keys and what the state words mean (the words carry the meaning, colours only help)."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from widgets.words import word

KEYS = [
    ("tab / arrows", "select a side", False),
    ("g", "re-probe the selected side now (carla RPC included)", False),
    ("p", "port scan: winNAT exclusions, ports in use, sides sharing a port", False),
    ("a", "adapter polling: start the server on each candidate until VRAM rises", True),
    ("l", "launch the side's harness (resume rule, checkpoint backup)", True),
    ("r", "guided recovery of a hung side (wizard)", True),
    ("x", "reclaim: stop an IDLE side's server", True),
    ("d", "results: per-route table of the side (n: the rig), DS/SR, abilities, ETA", False),
    ("ctrl+p", "command palette", False),
    ("?", "this help", False),
    ("q", "quit (runs keep going: the harness is detached)", False),
]
WORDS = [
    ("ALIVE / DEAD", "measured present / measured absent"),
    ("UNKNOWN", "could not measure: never treated as DEAD, blocks every destructive step"),
    ("FRESH / STALE", "log written within stall_s / quiet for longer (hung?)"),
    ("NOT_STARTED", "no log file yet"),
    ("IDLE", "server ALIVE with no evaluator: rendering for nobody"),
    ("ok / IN USE / RESERVED / SHARED", "port state from the last scan"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, read_only: bool) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        t = Text("Keys", style="bold")
        for key, what, destructive in KEYS:
            if destructive and self.read_only:
                continue
            t.append(f"\n  {key:<13} {what}")
        if self.read_only:
            t.append("\n  (read-only: a, l, r and x are not bound)", style="dim")
        t.append("\n\nState words", style="bold")
        for w, what in WORDS:
            t.append("\n  ")
            t.append_text(word(w.split(" ")[0]))
            t.append(f"{w[len(w.split(' ')[0]):]:<30} {what}")
        t.append("\n\nEsc closes", style="dim")
        with VerticalScroll(id="help-box"):
            yield Static(t)

    def action_close(self) -> None:
        self.dismiss(None)
