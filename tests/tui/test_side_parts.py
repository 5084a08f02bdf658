"""A pane's parts rebuild a line only when what it is made from changed."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from tests.tui.fakes import shown
from widgets.side_parts import HeartbeatBar, LogTail, ServerLine, SidePart
from widgets.words import duration


@pytest.fixture
def built(monkeypatch) -> Counter:
    """How many times each part class built its line."""
    counts: Counter = Counter()
    for cls in SidePart.__subclasses__():
        orig = cls.line

        def counting(self, s, orig=orig, name=cls.__name__):
            counts[name] += 1
            return orig(self, s)
        monkeypatch.setattr(cls, "line", counting)
    return counts


async def test_a_new_heartbeat_age_rebuilds_the_beat_line_only(built: Counter) -> None:
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        built.clear()
        later = replace(snap, heartbeat=replace(snap.heartbeat, age_s=(snap.heartbeat.age_s or 0) + 1))
        app.show_snapshot(later)
        assert set(built) == {"HeartbeatBar"}
        pane = app.main.pane("A")
        assert f"FRESH {duration(later.heartbeat.age_s)}" in str(pane.part(HeartbeatBar).render())

        built.clear()
        restarted = replace(later, server=replace(later.server, pid=(later.server.pid or 0) + 1))
        app.show_snapshot(restarted)
        assert built["ServerLine"] == 1 and f"pid {restarted.server.pid}" in str(pane.part(ServerLine).render())

        built.clear()
        app.show_snapshot(replace(restarted, log_tail=("a new line",)))
        assert built["LogTail"] == 1 and "a new line" in str(pane.part(LogTail).render())
        assert "ServerLine" not in built


async def test_a_resize_rebuilds_every_line(built: Counter) -> None:
    async with shown() as (app, pilot, b):
        built.clear()
        await pilot.resize_terminal(90, 40)
        await pilot.pause(0.3)
        assert {"ServerLine", "VramGauge", "RouteProgress"} <= set(built)


async def test_the_log_tail_grows_and_shrinks_with_its_lines() -> None:
    """The tail's height is auto (up to 3 lines): a console that opened on a quiet log must show all
    three lines once the evaluator writes them, not the first one only."""
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        pane = app.main.pane("A")
        heights = []
        for lines in (("one",), ("one", "two", "three"), ("one", "two"), ()):
            app.show_snapshot(replace(snap, log_tail=lines))
            await pilot.pause(0.1)
            n = max(1, len(lines))
            heights.append(pane.size.height)
            drawn = [pane.render_line(y).text.strip() for y in range(len(pane.rows()))]
            assert drawn[-n:] == (list(lines) or ["log    (no lines)"]), drawn
        # The pane grows by a row for each log line and shrinks again (laid out anew, not cut).
        assert [h - heights[0] for h in heights] == [0, 2, 1, 0]
