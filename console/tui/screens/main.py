"""The main screen: rig header, one pane per side, the event log, the Footer.

Panes sit in a grid that is two columns wide from 100 terminal columns and one column below (the app's
horizontal breakpoints set `-wide` / `-narrow` on the screen); any number of sides scroll. The keys act on
the selected (focused) pane. Destructive keys are bound only on OperatorScreen, the screen of a console
that is not --read-only: a read-only console's MainScreen has none of them (not in the Footer, not in the
palette, not as a key), and check_action refuses their actions as a second gate.
"""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.reactive import Reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer

from widgets.event_log import EventLog
from widgets.rig_header import RigHeader
from widgets.side_pane import SidePane
from widgets.side_table import SideRow, SideTable

TABLE_FROM = 5   # this many sides and more: a table of sides and one detail pane (tens of sides, 80×24)


def is_tabular(sides: int) -> bool:
    """The main screen of a rig of this many sides is a table of sides (and one detail pane)."""
    return sides >= TABLE_FROM

# Every binding has an id: a user keymap (console/tui/keymap.py) rebinds it by that id.
SAFE_BINDINGS: list[BindingType] = [
    Binding("g", "reprobe", "Probe", id="reprobe"),
    Binding("i,enter", "detail", "Detail", id="detail"),
    Binding("p", "ports", "Ports", id="ports"),
    Binding("question_mark", "help", "Help", key_display="?", id="help"),
    Binding("d", "results", "Results", show=False, id="results"),
    Binding("tab", "select(1)", "Side", show=False, id="next-side"),
    Binding("shift+tab", "select(-1)", show=False, id="previous-side"),
    Binding("down,right", "select(1)", show=False, id="next-side-arrows"),
    Binding("up,left", "select(-1)", show=False, id="previous-side-arrows"),
]
# The destructive ones, bound only on OperatorScreen (outside --read-only).
DESTRUCTIVE_BINDINGS: list[BindingType] = [
    Binding("a", "adapter", "Adapter", id="adapter"),
    Binding("l", "launch", "Launch", id="launch"),
    Binding("r", "recover", "Recover", id="recover"),
    Binding("x", "reclaim", "Reclaim", id="reclaim"),
    Binding("h", "restart_server", "Restart server", id="restart_server"),
]
DESTRUCTIVE_ACTIONS = frozenset(b.action for b in DESTRUCTIVE_BINDINGS if isinstance(b, Binding))


class SideList(VerticalScroll, inherit_bindings=False, can_focus=False):
    """The scrolling column/grid of panes. Its own arrow-key scroll bindings are dropped: arrows select a
    side (focus), and focusing a pane scrolls it into view."""


class MainScreen(Screen):
    """The main screen of a --read-only console: the safe keys only."""

    BINDINGS = SAFE_BINDINGS
    # Textual's Screen repaints all of itself when the focus moves. Here a focus change is a change of
    # selected side: the pane that gained focus and the one that lost it restyle and repaint themselves
    # (their :focus rules), and nothing else on the screen depends on focus. Repainting the whole screen
    # was most of a Tab's latency.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

    def __init__(self, rig_name: str, sides: list[str], read_only: bool) -> None:
        super().__init__(id="main")
        self.rig_name = rig_name
        self.sides = sides
        self.read_only = read_only
        self.selected = sides[0] if sides else ""
        self.tabular = is_tabular(len(sides))
        self.rows: dict[str, SideRow] = {}
        self._say_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        header = RigHeader(id="rig-header")
        header.rig_name = self.rig_name
        header.read_only = self.read_only
        yield header
        if self.tabular:
            table = SideTable(self.sides, chosen=self.choose)
            self.rows = {s: SideRow(s, table, self._detail) for s in self.sides}
            yield table
            yield SidePane(self.selected, log=False)
        else:
            with SideList(id="sides"):
                for name in self.sides:
                    yield SidePane(name)
        yield EventLog(id="event-log")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.set_class(len(self.sides) == 1, "-one-side")
        self.set_class(self.tabular, "-tabular")
        self.query_one(EventLog).border_title = "events"
        if self.sides:
            self.pane(self.sides[0]).focus()

    def say(self, message: str, severity: str, timeout: float) -> None:
        """A short-lived message in the event log's title row (the app's notify on this screen)."""
        log = self.query_one(EventLog)
        style = {"error": "bold red", "warning": "bold yellow"}.get(severity, "bold")
        log.border_title = Text(message.replace("\n", " "), style=style)
        if self._say_timer is not None:
            self._say_timer.stop()
        self._say_timer = self.set_timer(timeout, self._unsay)

    def _unsay(self) -> None:
        self._say_timer = None
        self.query_one(EventLog).border_title = "events"

    def pane(self, side: str) -> SidePane | SideRow:
        if self.tabular:
            return self.rows[side]
        return self.query_one(f"#side-{side}", SidePane)

    def _detail(self, side: str, snap: object) -> None:
        """The detail pane shows the selected side (a table of sides: one pane for all)."""
        if side != self.selected:
            return
        pane = self.query_one(SidePane)
        row = self.rows[side]
        if pane.side != side:
            pane.side = side
            pane.border_title = side
        pane.show(row.snap)
        pane.greyed = row.greyed
        pane.ports = row.ports

    def on_side_table_chosen(self, msg: SideTable.Chosen) -> None:
        self.choose(msg.side)

    def choose(self, side: str) -> None:
        """The table's cursor is on side: the keys act on it and the detail pane shows it."""
        self.selected = side
        self._detail(side, None)

    def on_side_pane_selected(self, msg: SidePane.Selected) -> None:
        # Each pane posts from its own queue, so a pane's focus message can arrive after the focus has moved
        # on (Tab twice, quickly): only the pane that has the focus now selects its side.
        if isinstance(self.focused, SidePane) and self.focused.side == msg.side:
            self.selected = msg.side

    def action_select(self, step: int) -> None:
        if not self.sides:
            return
        if self.tabular:
            self.query_one(SideTable).step(step)
            return
        i = self.sides.index(self.selected) if self.selected in self.sides else 0
        # Selected now, not when the pane's focus message arrives: a key pressed right after Tab (a fast
        # typist, a loaded machine) must act on the side the operator moved to.
        self.selected = self.sides[(i + step) % len(self.sides)]
        self.pane(self.selected).focus()

    # Every action names the selected side and hands it to the app, which owns the backend and workers.
    def action_reprobe(self) -> None:
        self.app.reprobe(self.selected)  # type: ignore[attr-defined]

    def action_detail(self) -> None:
        self.app.show_detail(self.selected)  # type: ignore[attr-defined]

    def action_ports(self) -> None:
        self.app.scan_ports()  # type: ignore[attr-defined]

    def action_results(self) -> None:
        self.app.show_results(self.selected)  # type: ignore[attr-defined]

    def action_help(self) -> None:
        self.app.show_help()  # type: ignore[attr-defined]

    def action_adapter(self) -> None:
        self.app.guarded("adapter", self.selected)  # type: ignore[attr-defined]

    def action_launch(self) -> None:
        self.app.guarded("launch", self.selected)  # type: ignore[attr-defined]

    def action_reclaim(self) -> None:
        self.app.guarded("reclaim", self.selected)  # type: ignore[attr-defined]

    def action_restart_server(self) -> None:
        self.app.guarded("restart-server", self.selected)  # type: ignore[attr-defined]

    def action_recover(self) -> None:
        self.app.recover(self.selected)  # type: ignore[attr-defined]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Belt and braces: even a palette entry or a stray run_action cannot reach a destructive action.
        if self.read_only and action in DESTRUCTIVE_ACTIONS:
            return False
        return True


class OperatorScreen(MainScreen):
    """The main screen of a console that may act: the safe keys and the destructive ones."""

    BINDINGS = DESTRUCTIVE_BINDINGS


def main_screen(rig_name: str, sides: list[str], read_only: bool) -> MainScreen:
    cls = MainScreen if read_only else OperatorScreen
    return cls(rig_name, sides, read_only)
