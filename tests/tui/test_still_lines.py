"""Widgets with StillLines hand back their last lines only while Textual would serve all of them from its
cache: the screen they make is the screen Textual makes without them, through every kind of change."""
from __future__ import annotations

from dataclasses import replace

import textual
from textual._styles_cache import StylesCache
from textual.widget import Widget

from console.tui.app import ConsoleApp
from tests.tui.fakes import shown
from widgets.event_log import EventLog
from widgets.side_parts import LogTail, ServerLine
from widgets.still_lines import StillLines


def test_the_textual_internals_it_reads_are_there() -> None:
    # StillLines reads StylesCache._cache and ._dirty_lines: an upgrade that renames them must fail here.
    assert textual.__version__ == "8.2.8", "re-check widgets/still_lines.py against this Textual version"
    cache = StylesCache()
    assert isinstance(cache._cache, dict) and isinstance(cache._dirty_lines, set)
    assert Widget.render_lines.__qualname__ == "Widget.render_lines"


def screen_text(app: ConsoleApp) -> list[list]:
    return [list(strip) for strip in app.screen._compositor.render_strips()]


def still_widgets(app: ConsoleApp) -> list[Widget]:
    return [w for w in app.screen.walk_children(with_self=True) if isinstance(w, StillLines)]


def unremembered(app: ConsoleApp) -> list[list]:
    """The screen as Textual renders it without StillLines (every widget through its StylesCache)."""
    kept = {w: w._still for w in still_widgets(app)}
    for w in kept:
        w._still = None
    try:
        return screen_text(app)
    finally:
        for w, still in kept.items():
            w._still = still


async def test_the_screen_is_the_one_textual_makes_through_every_kind_of_change() -> None:
    async with shown() as (app, pilot, b):

        async def same(what: str) -> None:
            await pilot.pause(0.1)
            screen_text(app)            # a pass that fills the memos
            assert screen_text(app) == unremembered(app), what

        snap = b.snaps["A"]
        app.show_snapshot(b.snaps["B"])
        await same("first snapshots")
        later = replace(snap, log_tail=("a new line", "and another"),
                        heartbeat=replace(snap.heartbeat, age_s=(snap.heartbeat.age_s or 0) + 7))
        app.show_snapshot(later)
        await same("a new log line and beat age")
        app.main.pane("A").greyed = "poll timed out after 30 s: last values shown"
        await same("a greyed pane (a class on the parent restyles its parts)")
        await pilot.press("tab")
        await same("focus moved to the other side")
        app.main.pane("A").greyed = None
        await same("the pane no longer greyed")
        app.note("a note in the event log")
        await same("an event log line")
        for i in range(60):
            app.note(f"note {i}")
        await same("an event log that scrolls")
        app.main.query_one(EventLog).scroll_home(animate=False)
        await same("the event log scrolled back")
        await pilot.resize_terminal(90, 30)
        await same("a narrower terminal")
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        await pilot.press("escape")
        await same("after the help screen")


async def test_an_unchanged_widget_hands_back_its_last_lines_and_a_changed_one_renders() -> None:
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        pane = app.main.pane("A")
        server, log = pane.query_one(ServerLine), pane.query_one(LogTail)
        crop = server.size.region
        first = server.render_lines(crop)
        assert server.render_lines(crop) is first
        app.show_snapshot(replace(snap, server=replace(snap.server, pid=(snap.server.pid or 0) + 1)))
        again = server.render_lines(crop)
        assert again is not first and f"pid {(snap.server.pid or 0) + 1}" in "".join(s.text for s in again)
        lines = log.render_lines(log.size.region)
        assert log.render_lines(log.size.region) is lines
