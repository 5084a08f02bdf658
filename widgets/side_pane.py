"""One pane per side: a focusable box whose parts each render one idea from the side's snapshot.

The app hands the pane each snapshot (`show`) and sets `ports` and `greyed`; the pane only passes them
down to its parts.
Selecting a side is focusing its pane, so tab, arrows and the mouse all agree on what "selected" means.
"""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

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
)
from widgets.words import word


class PollNote(Static):
    """Why a pane is greyed (a poll that timed out or failed), empty otherwise."""


class SidePane(Vertical, can_focus=True):
    ports: reactive[dict[int, str] | None] = reactive(None, repaint=False)
    # Set when the last poll timed out or failed: the pane keeps its last values, greyed, with the reason.
    greyed: reactive[str | None] = reactive(None)

    class Selected(Message):
        """Posted when this pane gains focus, so the app knows which side the keys act on."""

        def __init__(self, side: str) -> None:
            super().__init__()
            self.side = side

    def __init__(self, side: str, **kw) -> None:
        super().__init__(id=f"side-{side}", classes="side-pane", **kw)
        self.side = side
        self.border_title = side
        self._parts: list[SidePart] = []
        # A plain attribute set by show(), not a reactive: a new snapshot every poll must not repaint the
        # whole pane (the parts repaint themselves when their own line changed), and Textual's reactive
        # machinery cost more than handing the snapshot down.
        self.snap: SideSnapshot | None = None

    def compose(self) -> ComposeResult:
        yield PollNote(id="poll-note")
        yield ServerLine()
        yield GpuLine()
        yield PortsLine()
        yield VramGauge()
        yield HeartbeatBar()
        yield EvaluatorLine()
        yield RouteProgress()
        yield LogTail(classes="log-tail")

    def show(self, snap: SideSnapshot | None) -> None:
        self.snap = snap
        if not self._parts:   # the parts are fixed once composed: not a DOM query every poll
            self._parts = list(self.query(SidePart))
        for part in self._parts:
            part.show(snap)
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
        self.query_one(PortsLine).status = ports

    def watch_greyed(self, reason: str | None) -> None:
        self.set_class(reason is not None, "-greyed")
        note = self.query_one(PollNote)
        note.display = reason is not None
        note.update(Text.assemble(word("UNKNOWN"), f" {reason}") if reason else "")

    def on_focus(self) -> None:
        self.post_message(self.Selected(self.side))
