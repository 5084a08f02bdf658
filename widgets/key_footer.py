"""The key bar at the bottom of a screen: Textual's Footer, recomposed only when the keys it shows changed.

Textual's Footer rebuilds itself (every key widget unmounted and mounted again, then a layout of the
whole screen) on each "bindings updated" signal, and a focus change sends two of them. Here the keys are
the screen's, the same whichever pane is focused, so moving between sides cost two full layouts for a
footer that looked the same: most of a Tab's latency and of a help screen's open and close.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from widgets.still_lines import StillLines


class KeyFooter(StillLines, Footer):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._composed: tuple | None = None   # what the last compose showed

    def shown(self, screen: Screen) -> tuple:
        """Everything of the active bindings that the Footer's compose renders."""
        return (self.show_command_palette, self.compact, tuple(
            (key, b.key, b.action, b.description, b.show, b.group, enabled, tooltip, self.app.get_key_display(b))
            for key, (_, b, enabled, tooltip) in screen.active_bindings.items()))

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._composed = self.shown(self.screen)
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if self._composed is not None and screen is self.screen and self.shown(screen) == self._composed:
            return
        super().bindings_changed(screen)
