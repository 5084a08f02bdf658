"""The idle benchmark's yardstick: a trivial Textual app that repaints 20 lines once a second.

Public API only (App, Static, set_interval): what any Textual app that shows a live screen costs on this
machine and this Textual release. bench/idle.py runs it beside the console, in the same window.

    python bench/trivial_app.py
"""
from __future__ import annotations

import time

from textual.app import App, ComposeResult
from textual.widgets import Static

LINES = 20


class TrivialApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(id="lines")

    def on_mount(self) -> None:
        self.tick = 0
        self.repaint()
        self.set_interval(1.0, self.repaint)

    def repaint(self) -> None:
        self.tick += 1
        now = time.strftime("%H:%M:%S")
        self.query_one("#lines", Static).update(
            "\n".join(f"line {i:2d}  tick {self.tick}  {now}" for i in range(LINES)))


if __name__ == "__main__":
    TrivialApp().run()
