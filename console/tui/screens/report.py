"""A read-only text report in a modal (the port scan); Esc closes it."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ReportScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter", "close", "Back")]

    def __init__(self, title: str, lines: tuple[str, ...] | list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="report-box"):
            yield Static(Text(self.title_text, style="bold"), id="report-title")
            yield Static(Text("\n".join(self.lines) or "(empty)"), id="report-body")
            yield Static(Text("Esc closes", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
