"""widgets/repaint.py: a changed part reaches the screen as refresh() would take it there, without a wake
of the part's own message pump."""
from __future__ import annotations

from dataclasses import replace

import textual
from textual import messages
from textual.screen import Screen
from textual.widget import Widget

from tests.tui.fakes import shown
from tests.tui.test_still_lines import screen_text
from widgets.side_parts import HeartbeatBar, LogTail, SidePart
from widgets.words import duration


def test_the_textual_internals_it_uses_are_there() -> None:
    assert textual.__version__ == "8.2.8", "re-check widgets/repaint.py against this Textual version"
    w = Widget()
    for name in ("_layout_cache", "_rich_style_cache", "_layout_required", "_refresh_styles_required",
                 "_scroll_required", "_recompose_required", "_closing"):
        assert hasattr(w, name), name
    assert callable(Widget._set_dirty) and callable(Widget.clear_cached_dimensions)
    assert "_dirty_widgets" in Screen._on_update.__code__.co_names   # what its Update handler does


async def test_a_changed_part_is_on_the_screen_without_its_pump_waking(monkeypatch) -> None:
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        pane = app.main.pane("A")
        beat = pane.query_one(HeartbeatBar)
        await pilot.pause(0.1)
        prompted: list[SidePart] = []
        real_post = Widget.post_message

        def post(self, message):
            if isinstance(self, SidePart) and isinstance(message, messages.Prompt):
                prompted.append(self)
            return real_post(self, message)
        monkeypatch.setattr(Widget, "post_message", post)

        age = (snap.heartbeat.age_s or 0) + 11
        later = replace(snap, heartbeat=replace(snap.heartbeat, age_s=age), log_tail=("x", "y", "z"))
        app.show_snapshot(later)
        await pilot.pause(0.1)
        assert len(snap.log_tail) == 3 and prompted == []    # the beat and the tail changed, not their sizes
        shown_now = screen_text(app)
        assert any(duration(age) in "".join(seg.text for seg in row) for row in shown_now)
        assert all(line in "".join(seg.text for row in shown_now for seg in row) for line in ("x", "y", "z"))
        # Textual's own way gives the same screen.
        beat.refresh()
        pane.query_one(LogTail).refresh()
        await pilot.pause(0.1)
        assert screen_text(app) == shown_now

        prompted.clear()
        app.show_snapshot(replace(later, log_tail=("only one",)))   # fewer lines: laid out the usual way
        await pilot.pause(0.1)
        assert set(prompted) == {pane.query_one(LogTail)}
