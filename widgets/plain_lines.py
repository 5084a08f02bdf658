"""Plain lines of text turned into strips without Textual's general text pipeline.

A running evaluator's log tail changes on every poll, so the pane re-renders it every second. Textual
renders any text through one general path: a Content conversion, wrapping and formatting, link styles,
alignment, the background colours walked up the DOM. For the three lines of a log tail that cost about
0.6 ms a render on this project's 2-core machine, the largest single item of the idle console.

For text that is one style and plain ASCII, one line per row, no wrap, cut with an ellipsis, left and top
aligned and not selected, what that path produces is one segment a line: the characters (cut to the width
with a trailing "…"), in the widget's visual style with the line's offset in its meta. This mixin builds
exactly that and hands everything else to Textual. `_render_content` and `_RenderCache` are Textual
internals: textual is pinned, and tests/tui/test_plain_lines.py compares this output with Textual's own
for every case the fast path takes, so an upgrade that changes either fails there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.text import Text
from textual.strip import Strip
from textual.widget import _RenderCache

if TYPE_CHECKING:
    from textual.widget import Widget
    _Base = Widget
else:
    _Base = object   # a plain mixin, for the reason given in widgets/still_lines.py


class PlainLines(_Base):
    """Mixin for a Widget whose render() returns a Text: put it before the Textual base."""

    def plain_text(self) -> Text | None:
        """The Text render() returns, where it is already built; None: let Textual render."""
        return None

    def _render_content(self) -> None:
        lines = self._plain_lines()
        if lines is None:
            super()._render_content()
            return
        width = self.size.width
        style = self.visual_style
        strips = []
        for y, line in enumerate(lines):
            if len(line) > width:
                line = line[:width - 1] + "…"
            strips.append(Strip([Segment(line, style.rich_style_with_offset(0, y))], len(line)))
        self._render_cache = _RenderCache(self.size, strips)
        self._dirty_regions.clear()

    def _plain_lines(self) -> list[str] | None:
        """The rows, where the fast path gives what Textual would; else None."""
        text = self.plain_text()
        width, height = self.size
        if text is None or text.spans or text.style or not width or self.text_selection is not None:
            return None
        styles = self.styles
        if (styles.text_wrap != "nowrap" or styles.text_overflow != "ellipsis" or styles.text_align not in ("start", "left")
                or tuple(styles.content_align) != ("left", "top") or styles.line_pad):
            return None
        lines = text.plain.split("\n")[:height]
        # Printable ASCII only: one character is one cell, and nothing (tabs, wide or combining
        # characters) needs Textual's cell arithmetic. Empty rows go to Textual too.
        if not all(line and line.isascii() and line.isprintable() for line in lines):
            return None
        return lines
