"""Widgets that hand the compositor their last lines back while nothing about them changed.

Textual's compositor re-renders every widget whose container overlaps the area being updated, not just the
widgets that changed: a heartbeat line in each pane makes it ask every line of both panes, the header, the
event log and the footer for their lines, once a second. Textual answers that from its per-line cache, but
the answer still costs about 0.1 ms a widget (background colours walked up the DOM, per-line lookups), which
was most of an idle compositor pass.

A widget with this mixin keeps the list of strips of its last render and returns it while the StylesCache
has nothing to redo: the same crop, the same line filters, no dirty line, and the cached lines still there.
Every way Textual invalidates a widget's lines (refresh, a style or class change, a resize) goes through
the StylesCache (`clear` or `set_dirty`), so those are exactly the conditions under which Textual itself
would serve every line from that cache. The attributes read here are Textual internals: textual is pinned,
and tests/tui/test_still_lines.py fails on an upgrade that moves them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.geometry import Region
from textual.strip import Strip

if TYPE_CHECKING:
    from textual.widget import Widget
    _Base = Widget
else:
    # Not a Widget at run time: Textual derives a class's CSS type, default CSS and focus flags from its
    # first DOM base, and a Widget mixin in front would replace Screen's, Footer's or Static's.
    _Base = object


class StillLines(_Base):
    """Mixin for a Widget: put it before the Textual base (`class Pane(StillLines, Vertical)`)."""

    _still: tuple | None = None   # (crop, filters, number of cached lines, strips) of the last render

    def render_lines(self, crop: Region) -> list[Strip]:
        cache = self._styles_cache
        filters = self.get_line_filters()
        last = self._still
        if (last is not None and last[2] and not cache._dirty_lines and last[0] == crop
                and last[2] == len(cache._cache) and last[1] == filters):
            return last[3]
        strips = super().render_lines(crop)
        self._still = (crop, filters, len(cache._cache), strips)
        return strips
