"""Repaint a widget whose lines changed, without a wake of its own message pump.

`Widget.refresh()` marks the widget dirty and prompts the widget's own message pump; that pump wakes (a
task step), finds nothing queued, runs its idle handler, and only then tells the screen, whose pump
wakes in turn and starts the update timer. A side's parts change several lines every poll, so on the
idle console those wake-ups of the parts' pumps were about a tenth of its CPU: each is a pass through
the event loop that does nothing but forward the request.

`repaint(widget)` does what that chain does for a plain repaint, in place: the same invalidation as
refresh(), then what the screen's Update handler does (the widget joins the screen's dirty widgets and
the screen's pump is prompted, once for all the widgets of a poll). Whenever anything else is pending on
the widget (a layout, a style refresh, a scroll) or it is not on a screen yet, it is refresh() itself.
The attributes used are Textual internals: textual is pinned, and tests/tui/test_repaint.py checks them
and that the screen comes out as refresh() makes it.
"""
from __future__ import annotations

from textual.dom import NoScreen
from textual.widget import Widget


def repaint(widget: Widget) -> None:
    if (not widget.is_mounted or widget._closing or not widget.display or widget._layout_required
            or widget._refresh_styles_required or widget._scroll_required or widget._recompose_required):
        widget.refresh()
        return
    try:
        screen = widget.screen
    except NoScreen:
        widget.refresh()
        return
    if screen not in screen._compositor:
        widget.refresh()
        return
    # refresh(), the repaint part of it (Widget.refresh: repaint=True, no regions)
    widget._layout_cache.clear()
    widget._set_dirty()
    widget.clear_cached_dimensions()
    widget._rich_style_cache.clear()
    # Screen._on_update, for the messages.Update that the widget's idle handler would have sent
    screen._dirty_widgets.add(widget)
    screen.check_idle()
