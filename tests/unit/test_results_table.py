"""The results table's rows, sort (unknowns last both ways, ids as numbers) and word filter."""
from __future__ import annotations

from ops.results.table import Row, filter_rows, sort_rows


def row(rid: str, town: str, status: str, ds: float | None) -> Row:
    values = (rid, town, "T", status, ds, None, None, None, None)
    cells = (rid, town, "T", status, "-" if ds is None else f"{ds:.1f}", "-", "-", "-", "-")
    return Row(values, cells)


ROWS = [row("10", "Town12", "Completed", 60.0), row("9", "Town01", "MISSING", None),
        row("100", "Town12", "Failed - Agent got blocked", 20.0), row("2", "Town13", "Perfect", 100.0)]


def test_ids_sort_as_numbers_and_unknown_ds_stays_last():
    assert [r.route_id for r in sort_rows(ROWS, 0)] == ["2", "9", "10", "100"]
    assert [r.route_id for r in sort_rows(ROWS, 4)] == ["100", "10", "2", "9"]
    assert [r.route_id for r in sort_rows(ROWS, 4, reverse=True)] == ["2", "10", "100", "9"]


def test_filter_every_word_somewhere():
    assert [r.route_id for r in filter_rows(ROWS, "town12 failed")] == ["100"]
    assert [r.route_id for r in filter_rows(ROWS, "  ")] == ["10", "9", "100", "2"]
    assert filter_rows(ROWS, "nothing-like-this") == []


def test_a_long_scenario_type_is_shortened_but_still_found():
    from ops.parse.checkpoint import RouteRecord
    from ops.results.merge import RouteRow
    from ops.results.routes_xml import RouteInfo
    from ops.results.table import row_of
    info = RouteInfo("7", "Town12", "VanillaSignalizedTurnEncounterGreenLight", 100.0, 0, 0)
    rec = RouteRecord(index=0, route_id="RouteScenario_7_rep0", status="Completed", score_composed=90.0,
                      score_route=100.0, score_penalty=0.9)
    r = row_of(RouteRow(info, rec, "side:A"))
    assert len(r.cells[2]) == 30 and r.cells[2].endswith("…")
    assert filter_rows([r], "greenlight") == [r]
