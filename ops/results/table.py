"""The per-route results table of the TUI: its rows, their sort and filter (pure; the screen shows them)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ops.results.merge import Merged, RouteRow
from ops.results.render import penalty_infractions

# Short headers: the nine columns fit a 120-column terminal (the full names are in the help and the CSV).
COLUMNS: tuple[str, ...] = ("id", "town", "scenario type", "status", "DS", "pen", "inf", "w/g", "att")
TYPE_CHARS = 30   # the longest Bench2Drive type is 40 characters; the rest of it stays searchable


@dataclass(frozen=True)
class Row:
    """One route: typed values (for sorting) and their cells (for showing), parallel to COLUMNS."""
    values: tuple[object, ...]
    cells: tuple[str, ...]

    @property
    def route_id(self) -> str:
        return self.cells[0]


def _cell(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def row_of(r: RouteRow, attempts: int | None = None) -> Row:
    rec = r.record
    status = rec.status if rec is not None else r.state.upper()
    ds = r.ds if rec is not None else None
    penalty = rec.score_penalty if rec is not None else None
    infractions = penalty_infractions(r) if rec is not None else None
    values = (r.route.route_id, r.route.town, r.route.scenario_type, status, ds, penalty, infractions, r.wall_game,
              attempts)
    scenario = r.route.scenario_type or "-"
    if len(scenario) > TYPE_CHARS:
        scenario = scenario[:TYPE_CHARS - 1] + "…"
    cells = (r.route.route_id, r.route.town, scenario, status, _cell(ds, ".1f"),
             _cell(penalty, ".2f"), _cell(infractions), _cell(r.wall_game, ".1f") + ("x" if r.wall_game else ""),
             _cell(attempts))
    return Row(values=values, cells=cells)


def rows_of(merged: Merged, attempts: Mapping[str, int] | None = None) -> list[Row]:
    return [row_of(r, (attempts or {}).get(r.route.route_id)) for r in merged.rows]


def _key(value: object) -> tuple:
    # Unknowns sort last whichever the direction; numeric ids sort as numbers.
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    text = str(value)
    return (0, int(text), "") if text.isdigit() else (1, 0, text.lower())


def sort_rows(rows: Sequence[Row], column: int, reverse: bool = False) -> list[Row]:
    known = [r for r in rows if r.values[column] is not None]
    unknown = [r for r in rows if r.values[column] is None]
    return sorted(known, key=lambda r: _key(r.values[column]), reverse=reverse) + unknown


def filter_rows(rows: Sequence[Row], text: str) -> list[Row]:
    """Rows with every whitespace-separated word of `text` in some cell (case-insensitive)."""
    words = text.lower().split()
    if not words:
        return list(rows)

    def haystack(r: Row) -> str:
        # Cells and the full values (a shortened scenario type stays findable by its whole name).
        return "\n".join((*r.cells, *(str(v) for v in r.values if v is not None))).lower()
    return [r for r in rows if all(w in haystack(r) for w in words)]
