"""The lines of a side pane, one small class per idea.

Each part is handed the side's latest SideSnapshot by the pane (`show`: attributes down) and makes one
line from it (the log tail: up to three). Parts never probe anything and never hold ops objects beyond
the snapshot. They are not widgets: the pane draws all its lines itself (widgets/side_pane.py), because
every compositor pass renders every widget of a container it touches, and nine widgets a pane cost more
than the lines that changed.
Times are measured against the snapshot's own `at`, not the wall clock, so a frozen snapshot renders the
same text every time (the snapshot tests rely on it) and a stale one does not pretend to be live.
"""
from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.widget import Widget

from ops.probes.lifecycle import BEAT_OFF
from ops.probes.prober import SideSnapshot
from ops.results.live import hours
from ops.tristate import State
from widgets.words import bar, duration, mib, uptime, word

LOG_ROWS = 3


class SidePart:
    """One line (or a few) of a pane, made from the side's snapshot.

    A new snapshot arrives every poll, but most lines read the same as before: the text is built when the
    snapshot is set and the pane redraws only the parts whose line changed."""

    label = ""

    def __init__(self, pane: Widget) -> None:
        self.pane = pane
        self.snap: SideSnapshot | None = None
        self._shown: Text | None = None
        self._inputs: tuple | None = None

    @property
    def app(self) -> Any:
        return self.pane.app

    @property
    def width(self) -> int:
        return self.pane.content_size.width

    def inputs(self, s: SideSnapshot) -> tuple | None:
        """What of s the line is made from, where that is cheaper to compare than the line is to build;
        None: build the line every time."""
        return None

    def _make_line(self) -> Text:
        if self.snap is None:
            return Text(f"{self.label} …", style="dim")
        return self.line(self.snap)

    def rebuild(self) -> bool:
        """Make the line again if its inputs changed; True when the line reads differently."""
        inputs = None if self.snap is None else self.inputs(self.snap)
        if inputs is not None and inputs == self._inputs and self._shown is not None:
            return False      # made from the same values: the same line
        self._inputs = inputs
        text = self._make_line()
        if self._shown is None or line_key(text) != line_key(self._shown):
            self._shown = text
            return True
        return False

    def show(self, snap: SideSnapshot | None) -> bool:
        self.snap = snap
        return self.rebuild()

    def forget(self) -> None:
        """The pane's width changed: bars follow it."""
        self._shown = self._inputs = None

    def render(self) -> Text:
        if self._shown is None:
            self._shown = self._make_line()
        return self._shown

    def rows(self) -> list[Text]:
        """The pane rows this part takes: one."""
        return [self.render()]

    def line(self, s: SideSnapshot) -> Text:  # pragma: no cover - every part overrides it
        raise NotImplementedError

    def bar_width(self, used: int) -> int:
        """Cells left for a bar after `used` cells of text: bars shrink first on a narrow terminal."""
        return max(4, min(24, self.width - used))


def line_key(t: Text) -> tuple:
    # Rich's Text equality ignores the base style; a line that only changes colour must repaint too.
    return (t.plain, tuple(t.spans), str(t.style))


def _head(label: str) -> Text:
    return Text(f"{label:<7}", style="bold")


class ServerLine(SidePart):
    """Server state word, pid, uptime, rpc version; IDLE when it renders for nobody."""

    label = "server"

    def inputs(self, s: SideSnapshot) -> tuple:
        sv = s.server
        return (sv.verdict.state, sv.pid, None if sv.create_time is None else uptime(s.at - sv.create_time),
                sv.version, s.idle, None if sv.verdict.state is State.ALIVE else sv.verdict.summary)

    def line(self, s: SideSnapshot) -> Text:
        sv = s.server
        t = _head("server") + word(sv.verdict.state.value)
        if sv.pid is not None:
            t.append(f"  pid {sv.pid}")
        if sv.create_time is not None:
            t.append(f"  up {uptime(s.at - sv.create_time)}")
        if sv.version:
            t.append(f"  rpc {sv.version}")
        if s.idle:
            t.append("  ")
            t.append_text(word("IDLE"))
            if not getattr(self.app, "read_only", False):
                t.append(" (x reclaims)", style="dim")
        if sv.verdict.state is not State.ALIVE and sv.verdict.summary:
            t.append(f"  {sv.verdict.summary}", style="dim")
        return t


class GpuLine(SidePart):
    """The adapter index the server runs on and that GPU's name."""

    label = "gpu"

    def inputs(self, s: SideSnapshot) -> tuple:
        gpu = s.gpu_of_server()
        return (s.server.adapter, s.side.server.adapter, None if gpu is None else gpu.name)

    def line(self, s: SideSnapshot) -> Text:
        adapter = s.server.adapter if s.server.adapter is not None else s.side.server.adapter
        gpu = s.gpu_of_server()
        t = _head("gpu") + Text(f"adapter {adapter if adapter is not None else '?'}")
        t.append(f"  {gpu.name}" if gpu is not None else "  gpu ?")
        return t


class PortsLine(SidePart):
    """rpc / streaming / secondary / TM ports, each with its word from the last port scan."""

    label = "ports"

    def __init__(self, pane: Widget) -> None:
        super().__init__(pane)
        # port -> word ('ok' | 'IN USE' | 'RESERVED' | 'SHARED' | 'UNKNOWN'); None until a scan ran
        self.status: dict[int, str] | None = None

    def inputs(self, s: SideSnapshot) -> tuple:
        return (s.side.server.ports, s.side.evaluator.tm_port, self.status)

    def line(self, s: SideSnapshot) -> Text:
        rpc, stream, sec = s.side.server.ports
        t = _head("ports")
        for i, (name, port) in enumerate((("rpc", rpc), ("str", stream), ("sec", sec), ("tm", s.side.evaluator.tm_port))):
            if i:
                t.append("  ")
            t.append(f"{name} {port}")
            if self.status is not None:
                t.append(" ")
                t.append_text(word(self.status.get(port, "UNKNOWN")))
        if self.status is None:
            t.append("  (p scans)", style="dim")
        return t


class VramGauge(SidePart):
    """GPU used/total as a bar, and this server's own share of it."""

    label = "vram"

    def inputs(self, s: SideSnapshot) -> tuple:
        gpu = s.gpu_of_server()
        return (None if gpu is None else (gpu.used_mb, gpu.total_mb), s.server_vram_mb,
                s.vram is not None and not s.vram.ok)

    def line(self, s: SideSnapshot) -> Text:
        gpu = s.gpu_of_server()
        used, total = (gpu.used_mb, gpu.total_mb) if gpu is not None else (None, None)
        frac = used / total if used is not None and total else None
        text = f" {mib(used)}/{mib(total)} MiB  this {mib(s.server_vram_mb)}"
        t = _head("vram") + Text(f"[{bar(frac, self.bar_width(9 + len(text)))}]")
        t.append(text)
        if s.vram is not None and not s.vram.ok:
            t.append("  ")
            t.append_text(word("UNKNOWN"))
        return t


class HeartbeatBar(SidePart):
    """The log's age against stall_s: the bar fills as the side goes quiet; full means STALE."""

    label = "beat"

    def inputs(self, s: SideSnapshot) -> tuple:
        # The age changes every poll, its display (whole seconds, the bar's cells) mostly does not.
        hb = s.heartbeat
        w = s.beat_word
        frac = None if hb.age_s is None else hb.age_s / hb.stall_s if hb.stall_s else 1.0
        if hb.age_s is None and w == "NOT_STARTED":
            frac = 0.0
        after = f" {duration(hb.age_s)} / stall {duration(hb.stall_s)}"
        if w == BEAT_OFF:   # a side that does not run: its log's age means nothing (issue 23)
            frac, after = 0.0, f" {s.lifecycle.value.lower()}: not watched"
        error = hb.evidence.error if w == "UNKNOWN" else None
        return (w, bar(frac, self.bar_width(10 + len(w) + len(after))), after, error)

    def line(self, s: SideSnapshot) -> Text:
        w, cells, after, error = self.inputs(s)
        t = _head("beat") + Text(f"[{cells}] ")
        t.append_text(word(w))
        t.append(after)
        if error:
            t.append(f"  {error}", style="dim")
        return t


class EvaluatorLine(SidePart):
    """Evaluator state and phase, attempt k/N, DS so far, last route status."""

    label = "eval"

    def inputs(self, s: SideSnapshot) -> tuple:
        e = s.evaluator
        # The checkpoint reading is the cached object while the file is unchanged: DS and the last status
        # come from it.
        return (e.verdict.state, e.phase, e.harness.attempt if e.harness is not None else None,
                s.side.evaluator.max_attempts, e.checkpoint)

    def line(self, s: SideSnapshot) -> Text:
        e = s.evaluator
        attempt = e.harness.attempt if e.harness is not None else None
        t = _head("eval")
        if e.phase == "restarting" and not attempt:
            # The harness is up and has not started its first attempt yet: nothing is dead.
            t.append_text(word("starting"))
            t.append("  harness up, no attempt yet", style="dim")
            return t
        if e.phase in ("restarting", "finished"):
            t.append_text(word(e.phase))   # no evaluator process, as expected: DEAD would alarm for nothing
        else:
            t.append_text(word(e.verdict.state.value))
            t.append(" ")
            t.append_text(word(e.phase))
        t.append(f"  attempt {attempt if attempt is not None else '-'}/{s.side.evaluator.max_attempts}")
        t.append(f"  DS {e.ds:.1f}" if e.ds is not None else "  DS -")
        return t


class RouteProgress(SidePart):
    """Routes done/total as a bar; an unreadable checkpoint is '?', never 0."""

    label = "routes"

    def inputs(self, s: SideSnapshot) -> tuple:
        return (s.evaluator.checkpoint, s.results)

    def line(self, s: SideSnapshot) -> Text:
        extra = _results_text(s)
        cp = s.evaluator.checkpoint
        prog = cp.progress
        if prog is not None:
            done, total = prog
            frac = done / total if total else None
            text = f" {done}/{total}"
        else:
            frac = 0.0 if cp.missing else None
            text = " no checkpoint yet" if cp.missing else " ?/? UNKNOWN"
        t = _head("routes") + Text(f"[{bar(frac, self.bar_width(9 + len(text) + len(extra)))}]")
        t.append(text)
        return t + extra


def _results_text(s: SideSnapshot) -> Text:
    """SR so far, the ETA by town (and how many done routes it rests on), the fake-success flag."""
    live = s.results
    if live is None:
        return Text("")
    t = Text()
    if live.sr_so_far is not None:
        t.append(f"  SR {100 * live.sr_so_far:.0f}%")
    eta = live.eta
    if eta is not None and eta.routes_left == 0:
        t.append("  ETA done")
    elif eta is not None and eta.eta_s is not None:
        t.append(f"  ETA {hours(eta.eta_s)} ({eta.rests_on})" if eta.rests_on else f"  ETA ~{hours(eta.eta_s)}")
    if live.fake.flagged:
        t.append(f"  FAKE? {live.fake.ratio:.1f}x<{live.fake.floor:g}x", style="bold red")
    return t


class LogTail(SidePart):
    """The last lines the evaluator wrote (what an operator would `tail` first), dim, one per row, each
    cut with an ellipsis by the pane."""

    label = "log"

    def inputs(self, s: SideSnapshot) -> tuple:
        return (s.log_tail,)   # a quiet log keeps its lines: they are not cleaned again every poll

    def line(self, s: SideSnapshot) -> Text:
        if not s.log_tail:
            return Text("log    (no lines)", style="dim")
        return Text("\n".join(printable(ln.rstrip()[:300]) for ln in s.log_tail[-LOG_ROWS:]), style="dim")

    def rows(self) -> list[Text]:
        return self.render().split("\n")[-LOG_ROWS:]


def printable(line: str) -> str:
    """An evaluator's log carries terminal escapes and carriage returns (progress bars): shown raw they
    would move the cursor and garble the pane."""
    line = _ESCAPES.sub("", line).rsplit("\r", 1)[-1]
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else "·" for c in line)


_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
