"""Tens of sides on one screen: one row a side (state words, progress, heartbeat age, host/job, ETA),
sortable (`s` cycles the column, again reverses) and filterable (`/`: rows whose text holds every word).

The main screen shows this instead of one pane per side once a rig has more sides than fit (more than 4),
with one SidePane below as the selected side's detail. The app keeps talking to "a side's pane": `SideRow`
stands in for it (show / greyed / ports / focus), so polling, actions and holds work unchanged.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input

from ops.probes.prober import SideSnapshot
from widgets.side_rows import SideRows
from widgets.words import word

COLUMNS = ("SIDE", "STATE", "PROGRESS", "BEAT", "HOST/JOB", "ETA")
# Fixed widths (cells are padded by one each side): the six columns fill 80 terminal columns.
WIDTHS = (5, 19, 8, 5, 19, 6)
SORT_KEYS = ("side", "state", "progress", "beat", "where", "eta")


def _age(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"


def _eta(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s / 60:.0f}m" if s < 5400 else f"{s / 3600:.1f}h"


def row_of(side: str, snap: SideSnapshot | None, greyed: str | None) -> dict[str, Any]:
    """A row's cells and sort values, from a snapshot (None: not probed yet)."""
    if snap is None:
        return {"side": side, "state": "…", "progress": None, "beat": None, "where": "", "eta": None,
                "words": ("…",), "done": "-"}
    ev = snap.evaluator
    words: tuple[str, ...] = (snap.server.verdict.state.value, ev.verdict.state.value, snap.heartbeat.beat.value)
    if snap.idle:
        words = (*words, "IDLE")
    prog = ev.checkpoint.progress
    done = f"{prog[0]}/{prog[1]}" if prog else "?"
    frac = prog[0] / prog[1] if prog and prog[1] else None
    job = snap.job or {}
    where = snap.side.evaluator.host
    if job.get("id"):
        where = f"{job['id']}@{job.get('node') or '?'} {job.get('state', '')}".strip()
    eta = snap.results.eta.eta_s if snap.results and snap.results.eta else None
    return {"side": side, "state": " ".join(words), "progress": frac, "beat": snap.heartbeat.age_s,
            "where": where, "eta": eta, "words": words, "done": done, "greyed": greyed}


class SideTable(Vertical, can_focus=False):
    # With a table of sides the detail pane has no log tail (SidePane(log=False)), so that at 80x24 the
    # table keeps most of the screen (the side's log is one key away: `i`).
    SCOPED_CSS = False
    DEFAULT_CSS = """
    SideTable { height: 1fr; min-height: 7; }
    SideTable > #side-filter { height: 1; border: none; padding: 0 1; display: none; }
    SideTable > #side-filter.-on { display: block; }
    SideTable > SideRows { height: 1fr; }
    """
    BINDINGS = [
        Binding("s", "sort", "Sort"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", show=False),
    ]

    class Chosen(Message):
        """The highlighted row changed: the selected side."""

        def __init__(self, side: str) -> None:
            super().__init__()
            self.side = side

    def __init__(self, sides: list[str], chosen: Callable[[str], None] | None = None, **kw: Any) -> None:
        super().__init__(id="side-table", **kw)
        self.sides = list(sides)
        # chosen: called at once when the cursor moves. A Chosen message bubbling up to the screen arrives
        # only after the compositor pass of the cursor move, so the detail pane followed a frame later:
        # cursor move to pane title, 24 sides, load 14 on 2 cores: median 51 ms messaged, 12 ms called.
        self.chosen = chosen
        self._reorder_pending = False
        self.rows: dict[str, dict[str, Any]] = {s: row_of(s, None, None) for s in sides}
        self.sort_col = 0
        self.reverse = False
        self.filter = ""
        self.shown: list[str] = list(sides)
        self.table = SideRows(WIDTHS, COLUMNS, self._highlighted, id="side-rows")

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: words a row must hold (Enter keeps, Esc clears)", id="side-filter")
        yield self.table

    def on_mount(self) -> None:
        self._rebuild()

    # ----- content -----------------------------------------------------------------------------------
    def _cells(self, r: dict[str, Any]) -> tuple[Text | str, ...]:
        state = Text(" ").join(word(w) for w in r["words"])
        if r.get("greyed"):
            state = Text.assemble(word("UNKNOWN"), " ", Text(str(r["greyed"]), style="dim"))
        return (r["side"], state, r["done"], _age(r["beat"]), r["where"], _eta(r["eta"]))

    def _matches(self, r: dict[str, Any]) -> bool:
        if not self.filter:
            return True
        text = " ".join(str(v) for k, v in r.items() if k in ("side", "state", "where", "done")).lower()
        return all(w in text for w in self.filter.lower().split())

    def order(self) -> list[str]:
        key = SORT_KEYS[self.sort_col]

        def value(side: str) -> tuple:
            v = self.rows[side][key]
            return (v is None, v if v is not None else 0)   # unknowns last, whatever the direction
        names = [s for s in self.sides if self._matches(self.rows[s])]
        return sorted(names, key=value, reverse=self.reverse)

    def _rebuild(self) -> None:
        keep = self.selected
        self.shown = self.order()
        self.table.set_rows([(side, self._cells(self.rows[side])) for side in self.shown], keep)

    def set_row(self, side: str, snap: SideSnapshot | None, greyed: str | None) -> None:
        old = self.rows[side]
        new = row_of(side, snap, greyed)
        if new == old:
            return
        self.rows[side] = new
        if _age(new["beat"]) == _age(old["beat"]) and {**new, "beat": None} == {**old, "beat": None}:
            # Only the heartbeat age moved, within what its cell shows (most of a served side's beats):
            # nothing to draw; a table sorted by age may still reorder on the exact values.
            if SORT_KEYS[self.sort_col] == "beat":
                self._reorder_soon()
            return
        self.table.update_row(side, self._cells(new))   # drawn again only if shown and its text moved
        if side not in self.shown or self._matches(new) is False or new[SORT_KEYS[self.sort_col]] != \
                old[SORT_KEYS[self.sort_col]]:
            self._reorder_soon()

    def _reorder_soon(self) -> None:
        """Reorder once for all the sides of a beat (the app shows them in one batch), not once a side:
        sorted by heartbeat age, every side's row moves every beat: a rebuild a side made showing a beat
        of 24 sides cost ~105 ms of CPU, one rebuild a beat ~15 ms."""
        if not self._reorder_pending:
            self._reorder_pending = True
            self.call_later(self._reorder)

    def _reorder(self) -> None:
        self._reorder_pending = False
        if self.order() != self.shown:
            self._rebuild()

    # ----- selection -------------------------------------------------------------------------------------
    @property
    def selected(self) -> str | None:
        return self.table.cursor_key if self.shown else None

    def select(self, side: str) -> None:
        if side in self.shown:
            self.table.move_cursor(self.shown.index(side))
        self.table.focus()

    def step(self, n: int) -> None:
        if self.shown:
            self.table.move_cursor((self.table.cursor_row + n) % len(self.shown))

    def _highlighted(self, side: str) -> None:
        if self.chosen is not None:
            self.chosen(side)
        else:
            self.post_message(self.Chosen(side))

    # ----- sort and filter -------------------------------------------------------------------------------
    def action_sort(self) -> None:
        """Next column; the same column again (after a full cycle) reverses the order."""
        self.sort_col = (self.sort_col + 1) % len(COLUMNS)
        if self.sort_col == 0:
            self.reverse = not self.reverse
        arrow = "▲" if self.reverse else "▼"
        # The arrow is the point of the label: a narrow column gives up a letter of its name for it.
        self.table.set_header([name if i != self.sort_col else f"{name} {arrow}"
                               if len(name) + 2 <= WIDTHS[i] else f"{name[:WIDTHS[i] - 1]}{arrow}"
                               for i, name in enumerate(COLUMNS)])
        self._rebuild()

    def action_filter(self) -> None:
        box = self.query_one("#side-filter", Input)
        box.add_class("-on")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#side-filter", Input)
        box.value = ""
        box.remove_class("-on")
        self.filter = ""
        self._rebuild()
        self.table.focus()

    def on_input_changed(self, msg: Input.Changed) -> None:
        msg.stop()
        self.filter = msg.value
        self._rebuild()

    def on_input_submitted(self, msg: Input.Submitted) -> None:
        msg.stop()
        if not msg.value:
            msg.input.remove_class("-on")
        self.table.focus()


class SideRow:
    """What the app calls a side's pane, for a side shown as a table row: the row shows the snapshot;
    the detail pane shows it too while the side is selected."""

    def __init__(self, side: str, table: SideTable, detail: Callable[[str, SideSnapshot | None], None]) -> None:
        self.side = side
        self._table = table
        self._detail = detail
        self.snap: SideSnapshot | None = None
        self._greyed: str | None = None
        self._ports: dict[int, str] | None = None

    def show(self, snap: SideSnapshot | None) -> None:
        self.snap = snap
        self._table.set_row(self.side, snap, self._greyed)
        self._detail(self.side, snap)

    @property
    def greyed(self) -> str | None:
        return self._greyed

    @greyed.setter
    def greyed(self, reason: str | None) -> None:
        if reason != self._greyed:
            self._greyed = reason
            self._table.set_row(self.side, self.snap, reason)

    @property
    def ports(self) -> dict[int, str] | None:
        return self._ports

    @ports.setter
    def ports(self, status: dict[int, str] | None) -> None:
        self._ports = status

    def focus(self) -> None:
        self._table.select(self.side)
