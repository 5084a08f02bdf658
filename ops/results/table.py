"""The per-route results table of the TUI: its rows, their sort and filter (pure; the screen shows them)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ops.results.merge import Merged, RouteRow
from ops.results.render import penalty_infractions

COLUMNS: tuple[str, ...] = ("id", "town", "scenario type", "status", "DS", "penalty", "infractions", "wall/game",
                            "attempts")


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
    cells = (r.route.route_id, r.route.town, r.route.scenario_type or "-", status, _cell(ds, ".1f"),
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
    return [r for r in rows if all(any(w in c.lower() for c in r.cells) for w in words)]
