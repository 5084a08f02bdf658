"""`d` opens the results table (the real 220 routes and a real checkpoint, via the snapshot), sorted,
filtered and switched between side and rig by key; the pane shows SR, ETA and the fake-success flag."""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

from textual.widgets import DataTable, Input, Static

from console.tui.screens.compare import CompareScreen
from console.tui.screens.results import ResultsScreen
from ops.parse.checkpoint import parse_checkpoint
from ops.probes.evaluator import CheckpointReading
from ops.results.live import summarise
from ops.results.routes_xml import parse_routes_table
from tests.tui.fakes import shown
from widgets.side_parts import RouteProgress

DATA = Path(__file__).resolve().parents[1] / "data"
TABLE = parse_routes_table((DATA / "bench2drive220.xml").read_bytes())
RAW = json.loads((DATA / "b2d_checkpoint_tfpp_0.json").read_text())


def with_results(snap, raw: dict, floor: float | None = None):
    cp = parse_checkpoint(json.dumps(raw))
    live = summarise(TABLE, cp, floor)
    return replace(snap, evaluator=replace(snap.evaluator, checkpoint=CheckpointReading(cp, None)), results=live)


def table_ids(screen: ResultsScreen) -> list[str]:
    t = screen.query_one(DataTable)
    return [str(t.get_row_at(i)[0]) for i in range(t.row_count)]


async def test_results_screen_sort_filter_scope() -> None:
    async with shown(size=(140, 45)) as (app, pilot, b):
        app.show_snapshot(with_results(b.snaps["A"], RAW, floor=8.0))
        other = copy.deepcopy(RAW)
        other["_checkpoint"]["records"] = other["_checkpoint"]["records"][:2]   # duplicates of A's first two
        app.show_snapshot(with_results(b.snaps["B"], other))
        await pilot.pause(0.1)
        pane_line = str(app.main.pane("A").part(RouteProgress).render())
        assert "SR 79%" in pane_line and "ETA" in pane_line and "FAKE?" in pane_line

        await pilot.press("d")
        await pilot.pause(0.2)
        screen = app.screen
        assert isinstance(screen, ResultsScreen) and screen.scope == "A"
        assert screen.query_one(DataTable).row_count == 220
        text = str(screen.query_one("#results-summary", Static).render())
        assert "recorded 28/220" in text and "missing 192" in text and "FAKE SUCCESS?" in text

        await pilot.press("s", "s", "s", "s")      # id → town → scenario type → status → DS
        await pilot.pause(0.1)
        ids = table_ids(screen)
        assert ids[0] == "2084"                      # lowest DS first (30.5, the TickRuntime failure)
        await pilot.press("o")
        await pilot.pause(0.1)
        t = screen.query_one(DataTable)
        assert str(t.get_row_at(0)[4]) == "100.0" and str(t.get_row_at(219)[4]) == "-"   # unknown DS stays last

        await pilot.press("slash")
        screen.query_one(Input).value = "tickruntime"
        await pilot.pause(0.2)
        assert table_ids(screen) == ["2084"]
        screen.query_one(Input).value = ""
        await pilot.pause(0.1)
        screen.query_one(DataTable).focus()

        await pilot.press("n")                      # the next scope after A: B
        await pilot.pause(0.1)
        assert screen.scope == "B"
        await pilot.press("n")                      # then the rig: both sides, duplicates named
        await pilot.pause(0.1)
        assert screen.scope == "rig"
        text = str(screen.query_one("#results-summary", Static).render())
        assert "duplicates 2" in text and "recorded 28/220" in text

        await pilot.press("c")                      # paired ΔDS, side A against side B
        await pilot.pause(0.2)
        assert isinstance(app.screen, CompareScreen)
        plot = str(app.screen.query_one("#compare-plot", Static).render()).splitlines()
        assert len(plot) == 11 and set(plot[5]) == {"─"} and len(plot[5]) == 2   # two shared routes
        summary = str(app.screen.query_one("#compare-summary", Static).render())
        assert "n 2" in summary and "too few" not in summary
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert isinstance(app.screen, ResultsScreen)
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ResultsScreen)
