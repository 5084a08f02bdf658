"""`d`: the results of the selected side, or of the whole rig, as a per-route table.

Built from the snapshots the app already holds (each side's checkpoint and routes file as last polled):
opening it reads nothing and blocks nothing. Sort with `s` (next column) and `o` (reverse), filter by
typing words in the box (`/` focuses it), switch between the rig and each side with `n`; `c` compares this
side with the next one (paired per-route ΔDS, console/tui/screens/compare.py).
"""
from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from ops.parse.checkpoint import RouteRecord
from ops.probes.prober import SideSnapshot
from ops.results.abilities import ability_mean
from ops.results.attempts import failures_of, route_attempts
from ops.results.eta import rig_eta
from ops.results.live import hours
from ops.results.merge import Merged, Source, merge, route_key
from ops.results.paired import compare
from ops.results.routes_xml import union
from ops.results.table import COLUMNS, Row, filter_rows, rows_of, sort_rows

RIG = "rig"


def merged_for(snaps: Mapping[str, SideSnapshot], scope: str) -> Merged | None:
    """The merged result of one side (scope = its name) or of every side (scope = RIG); None without a
    readable routes file."""
    names = list(snaps) if scope == RIG else [scope]
    tables, sources, retired = [], [], []
    for name in names:
        snap = snaps.get(name)
        if snap is None or snap.results is None or snap.results.routes is None:
            continue
        tables.append(snap.results.routes)
        cp = snap.evaluator.checkpoint.checkpoint
        if cp is not None:
            sources.append(Source(f"side:{name}", cp))
        retired += list(getattr(snap.evaluator.harness, "retired", None) or ())
    if not tables:
        return None
    return merge(union(tables), sources, retired=retired)


def summary(snaps: Mapping[str, SideSnapshot], scope: str, m: Merged | None) -> Text:
    t = Text(f"{'rig' if scope == RIG else 'side ' + scope}: ", style="bold")
    if m is None:
        t.append("no readable routes file yet", style="dim")
        return t
    ds, sr = m.ds, m.sr
    t.append(f"DS {ds:.2f}  SR {100 * (sr or 0):.1f}%  " if ds is not None else "DS -  ")
    t.append(f"recorded {m.recorded}/{m.total}  missing {len(m.missing)}  retired {len(m.retired)}  "
             f"duplicates {len(m.duplicates)}")
    names = list(snaps) if scope == RIG else [scope]
    etas = [s.results.eta for n in names if (s := snaps.get(n)) is not None and s.results and s.results.eta]
    if etas and len(etas) == len(names):
        eta = rig_eta(etas)
        if eta.routes_left == 0:
            t.append("  ETA done")
        elif eta.eta_s is not None:
            t.append(f"  ETA {hours(eta.eta_s)} (on {eta.rests_on} routes)")
    t.append("\n")
    t.append("  ".join(f"{n} {'-' if s.value is None else f'{100 * s.value:.0f}%'}{'≥' if s.lower_bound else ''}"
                       for n, s in m.abilities.items()))
    mean = ability_mean(m.abilities)
    if mean is not None:
        t.append(f"  mean {100 * mean:.0f}%")
    for n in names:
        s = snaps.get(n)
        if s is not None and s.results is not None and s.results.fake.flagged:
            t.append(f"\nFAKE SUCCESS? side {n}: {s.results.fake.message}", style="bold red")
    return t


def records_of(snap: SideSnapshot) -> dict[str, RouteRecord]:
    """A side's finished records by routes-file id (the first of a duplicate, as in results)."""
    out: dict[str, RouteRecord] = {}
    cp = snap.evaluator.checkpoint.checkpoint
    for rec in cp.records if cp is not None else ():
        if rec.finished:
            out.setdefault(route_key(rec.route_id), rec)
    return out


class ResultsScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("s", "sort", "Sort"),
        Binding("o", "reverse", "Reverse"),
        Binding("n", "scope", "Rig/side"),
        Binding("slash", "find", "Filter", key_display="/"),
        Binding("c", "compare", "Compare sides"),
    ]
    DEFAULT_CSS = """
    ResultsScreen { align: center middle; }
    #results-box { width: 96%; height: 90%; border: round $accent; background: $surface; padding: 0 1; }
    #results-summary { height: auto; }
    #results-filter { height: 3; }
    #results-table { height: 1fr; }
    """

    def __init__(self, snaps: Mapping[str, SideSnapshot], scope: str = RIG) -> None:
        super().__init__()
        self.snaps = dict(snaps)
        self.scopes = [RIG, *self.snaps]
        self.scope = scope if scope in self.scopes else RIG
        self.sort_col = 0
        self.sort_reverse = False
        self.rows: list[Row] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="results-box"):
            yield Static(id="results-summary")
            yield Input(placeholder="filter: words in any column (e.g. Town12 Failed)", id="results-filter")
            yield DataTable(id="results-table", zebra_stripes=True, cursor_type="row")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.load()
        self.query_one(DataTable).focus()

    def load(self) -> None:
        m = merged_for(self.snaps, self.scope)
        names = list(self.snaps) if self.scope == RIG else [self.scope]
        failures = failures_of(s.evaluator.harness for n in names if (s := self.snaps.get(n)) is not None)
        self.rows = rows_of(m, route_attempts(m, failures)) if m is not None else []
        self.query_one("#results-summary", Static).update(summary(self.snaps, self.scope, m))
        self.fill()

    def fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        shown = filter_rows(sort_rows(self.rows, self.sort_col, self.sort_reverse),
                            self.query_one(Input).value)
        table.add_rows(r.cells for r in shown)
        arrow = "↓" if self.sort_reverse else "↑"
        self.query_one("#results-box").border_title = (
            f"results · {self.scope} · {len(shown)}/{len(self.rows)} routes · sorted by {COLUMNS[self.sort_col]} {arrow}")

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.fill()

    def action_sort(self) -> None:
        self.sort_col = (self.sort_col + 1) % len(COLUMNS)
        self.fill()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.fill()

    def action_scope(self) -> None:
        self.scope = self.scopes[(self.scopes.index(self.scope) + 1) % len(self.scopes)]
        self.load()

    def action_compare(self) -> None:
        """Paired ΔDS of this side against the next side (on the rig: the first two sides)."""
        from console.tui.screens.compare import CompareScreen
        sides = list(self.snaps)
        if len(sides) < 2:
            self.notify("compare needs two sides", severity="warning")
            return
        a = self.scope if self.scope in sides else sides[0]
        b = sides[(sides.index(a) + 1) % len(sides)]
        self.app.push_screen(CompareScreen(compare(records_of(self.snaps[a]), records_of(self.snaps[b])), a, b))

    def action_find(self) -> None:
        self.query_one(Input).focus()

    def action_close(self) -> None:
        self.dismiss(None)
