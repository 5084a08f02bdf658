"""One pane per side: a focusable box that draws its parts' lines itself.

The app hands the pane each snapshot (`show`) and sets `ports` and `greyed`; the pane passes them down to
its parts (widgets/side_parts.py) and draws their lines through Textual's Line API. One widget, not one
per line: a compositor pass renders every widget of a container it touches, so a pane of nine widgets
cost nine renders a beat when only its heartbeat or log tail changed.
Selecting a side is focusing its pane, so tab, arrows and the mouse all agree on what "selected" means.
"""
from __future__ import annotations

from rich.text import Text
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ops.probes.prober import SideSnapshot
from widgets.side_parts import (
    EvaluatorLine,
    GpuLine,
    HeartbeatBar,
    LogTail,
    PortsLine,
    RouteProgress,
    ServerLine,
    SidePart,
    VramGauge,
    line_key,
)
from widgets.words import word


class SidePane(Widget, can_focus=True):
    ports: reactive[dict[int, str] | None] = reactive(None, repaint=False)
    # Set when the last poll timed out or failed: the pane keeps its last values, greyed, with the reason.
    greyed: reactive[str | None] = reactive(None, repaint=False)

    class Selected(Message):
        """Posted when this pane gains focus, so the app knows which side the keys act on."""

        def __init__(self, side: str) -> None:
            super().__init__()
            self.side = side

    def __init__(self, side: str, *, log: bool = True, **kw) -> None:
        super().__init__(id=f"side-{side}", classes="side-pane", **kw)
        self.side = side
        self.border_title = side
        self.parts: list[SidePart] = [cls(self) for cls in (ServerLine, GpuLine, PortsLine, VramGauge, HeartbeatBar,
                                                            EvaluatorLine, RouteProgress)]
        if log:   # a table of sides shows the selected side's detail without its log tail (room)
            self.parts.append(LogTail(self))
        # A plain attribute set by show(), not a reactive: a new snapshot every poll must not repaint the
        # whole pane (only the rows whose text changed are drawn again).
        self.snap: SideSnapshot | None = None
        self._side_rows: list[Text] | None = None
        self._side_strips: dict[int, tuple[tuple, Strip]] = {}   # row -> (what it was drawn from, the strip)
        self._side_width = -1
        self._side_notes = 0   # the first rows: why the pane is greyed

    def part(self, cls: type[SidePart]) -> SidePart:
        return next(p for p in self.parts if isinstance(p, cls))

    # -- what the app hands down

    def show(self, snap: SideSnapshot | None) -> None:
        self.snap = snap
        changed = False
        for part in self.parts:
            changed = part.show(snap) or changed
        if changed:
            self._redraw()
        if snap is not None:
            # A --debug run opted in by evaluator.debug_run is never a score: the pane says so (issue 21).
            # The lifecycle word leads the pane: whether the side runs at all, before how it measures.
            title = f"{self.side} {snap.lifecycle.value}"
            if snap.side.debug_level >= 1 and snap.side.evaluator.debug_run:
                title += " · DEBUGGING RUN"
            h = snap.evaluator.harness
            if h is not None and (h.supervisor not in ("watching", "done") or h.recoveries or h.retired):
                # The supervisor, where it says something: recovering, needs a human, budgets used, retired.
                title += f" · sup {h.supervisor} {h.recoveries} rec" + (f" · {len(h.retired)} retired" if h.retired else "")
            if self.border_title != title:
                self.border_title = title
            subtitle = f"{snap.side.server.host} / {snap.side.evaluator.host}"
            if self.border_subtitle != subtitle:   # every assignment repaints the whole pane
                self.border_subtitle = subtitle

    def watch_ports(self, ports: dict[int, str] | None) -> None:
        port_line = self.part(PortsLine)
        assert isinstance(port_line, PortsLine)
        port_line.status = ports
        if port_line.rebuild():
            self._redraw()

    def watch_greyed(self, reason: str | None) -> None:
        self.set_class(reason is not None, "-greyed")
        self._redraw(whole=True)

    def on_focus(self) -> None:
        self.post_message(self.Selected(self.side))

    def on_resize(self) -> None:
        for part in self.parts:
            part.forget()
            part.rebuild()
        self._redraw(whole=True)

    # -- drawing (Textual's Line API)

    def _redraw(self, whole: bool = False) -> None:
        """Draw again the rows whose text changed (only those: Textual then composes those lines alone),
        or all of the pane (whole), laid out anew when its number of rows changed."""
        before = self._side_rows
        self._side_rows = None
        rows = self.rows()
        if before is None or len(rows) != len(before):
            self.refresh(layout=before is not None)
            return
        if whole:
            self.refresh()
            return
        width = self.content_size.width
        changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(before, rows)) if line_key(a) != line_key(b)]
        if changed:
            self.refresh(*changed)

    def rows(self) -> list[Text]:
        """The pane's rows: why it is greyed (wrapped), then each part's row(s)."""
        if self._side_rows is None:
            rows: list[Text] = []
            if self.greyed:
                note = Text.assemble(word("UNKNOWN"), f" {self.greyed}")
                width = max(self.content_size.width, 1)
                rows.extend(note.wrap(self.app.console, width) if self.is_mounted else [note])
            self._side_notes = len(rows)
            for part in self.parts:
                rows.extend(part.rows())
            self._side_rows = rows
        return self._side_rows

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows())

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        rows = self.rows()
        # The greyed pane's lines fade (text-opacity); the reason it is greyed does not.
        style = self.rich_style if y < self._side_notes else self.visual_style.rich_style
        if width != self._side_width:
            self._side_strips.clear()
            self._side_width = width
        if y >= len(rows) or width <= 0:
            return Strip.blank(width, style)
        row = rows[y]
        key = (line_key(row), style)
        cached = self._side_strips.get(y)
        if cached is not None and cached[0] == key:
            return cached[1]    # a row that reads as before is not drawn again
        text = row.copy()
        text.truncate(width, overflow="ellipsis")
        strip = Strip(text.render(self.app.console), text.cell_len).apply_style(style)
        strip = strip.extend_cell_length(width, style)
        self._side_strips[y] = (key, strip)
        return strip
