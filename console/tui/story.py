"""What changed on a side between two of its snapshots, as event-log lines: the night's story.

The audit trail tells what was *done* (by this console, another one or a harness); this tells what
*happened*: a server that died, a heartbeat that went STALE, an evaluator that exited (with its exit code,
from the harness's attempt records), finished or was stopped, a server left IDLE. One line per change, so
a side that stays STALE for an hour writes one line, not one a poll. No Textual here: the app writes the
lines, the tests call `changes` on hand-built snapshots.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.probes.harness_state import AttemptRecord
from ops.probes.prober import SideSnapshot
from widgets.words import duration


@dataclass(frozen=True)
class Change:
    side: str
    word: str        # the state word the line is about (coloured by the log)
    text: str        # the rest of the line: what, and the evidence


def _progress(s: SideSnapshot) -> str:
    prog = s.evaluator.checkpoint.progress
    return "routes ?/?" if prog is None else f"routes {prog[0]}/{prog[1]}"


def first_look(s: SideSnapshot, read_only: bool = False) -> Change:
    """The line a side gets when this console first sees it (a console started mid-run tells where the
    story stands)."""
    e = s.evaluator
    attempt = e.harness.attempt if e.harness is not None else None
    text = (f"first look: server {s.server.verdict.state.value}, heartbeat {s.heartbeat.beat.value}, "
            f"evaluator {e.verdict.state.value} {e.phase}"
            + (f" attempt {attempt}/{s.side.evaluator.max_attempts}" if attempt else "") + f", {_progress(s)}")
    if needs_human(None, s):
        text += f"; the supervisor needs a human: {_human_why(s, read_only)}"
    return Change(s.name, "", text)


def needs_human(prev: SideSnapshot | None, new: SideSnapshot) -> bool:
    """The side's supervisor has just asked for a human (an UNKNOWN verdict, a refusal; another ask names
    another cause in its detail): the moment the event log says so and the terminal bell rings."""
    h = new.evaluator.harness
    if h is None or h.supervisor != "needs-human":
        return False
    was = prev.evaluator.harness if prev is not None else None
    return was is None or was.supervisor != "needs-human" or was.pid != h.pid or was.detail != h.detail


def _human_why(s: SideSnapshot, read_only: bool) -> str:
    h = s.evaluator.harness
    keys = " (g re-probes)" if read_only else " (g re-probes; r, h, l act)"
    return (h.detail if h is not None and h.detail else "no detail") + keys


def changes(prev: SideSnapshot | None, new: SideSnapshot, *, read_only: bool = False) -> list[Change]:
    if prev is None:
        return [first_look(new, read_only)]
    out: list[Change] = []
    side = new.name
    ps, ns = prev.server.verdict, new.server.verdict
    if ps.state is not ns.state:
        out.append(Change(side, ns.state.value, f"server {ns.state.value}: {ns.summary or 'no detail'}"
                          f" (was {ps.state.value})"))
    pb, nb = prev.heartbeat, new.heartbeat
    # The heartbeat means something only while an evaluator should be writing: a finished, stopped or
    # restarting side's log going quiet is not news.
    beat_matters = new.evaluator.phase in ("running", "unknown")   # quiet while restarting: expected
    if pb.beat is not nb.beat and beat_matters:
        if nb.beat.value == "STALE":
            what = f"log quiet for {duration(nb.age_s)} (stall {duration(nb.stall_s)}): hung? r recovers"
        elif nb.beat.value == "FRESH":
            what = f"log written {duration(nb.age_s)} ago"
        elif nb.beat.value == "UNKNOWN":
            what = nb.evidence.error or "cannot stat the log"
        else:
            what = "no log yet"
        out.append(Change(side, nb.beat.value, f"heartbeat {nb.beat.value}: {what} (was {pb.beat.value})"))
    out += _with_lifecycle(prev, new, _evaluator_changes(prev, new))
    if needs_human(prev, new):
        out.append(Change(side, "needs a human", f"needs a human: the supervisor asks: {_human_why(new, read_only)}"))
    if new.idle and not prev.idle:
        out.append(Change(side, "IDLE", "server renders for nobody: its evaluator is gone"
                          + ("" if read_only else " (x reclaims)")))
    return out


def _with_lifecycle(prev: SideSnapshot, new: SideSnapshot, lines: list[Change]) -> list[Change]:
    """A lifecycle move (RUNNING → STARTING ...) is the same change as the evaluator's line beside it: it
    rides on that line; it gets a line of its own only when nothing else said it."""
    pl, nl = prev.lifecycle, new.lifecycle
    if pl is nl:
        return lines
    move = f"{pl.value} → {nl.value}"
    if lines:
        last = lines[-1]
        return [*lines[:-1], Change(last.side, last.word, f"{last.text} [{move}]")]
    return [Change(new.name, nl.value, f"{move}: {new.life.reason}")]


def _exits(prev: SideSnapshot, new: SideSnapshot) -> list[AttemptRecord]:
    """Attempts whose exit code became known since prev (the harness records it when it reaps the wrapper,
    which may be a poll after the evaluator vanished)."""
    ph, nh = prev.evaluator.harness, new.evaluator.harness
    if nh is None:
        return []
    before = {a.n: a.exit_code for a in ph.attempts} if ph is not None and ph.pid == nh.pid else {}
    return [a for a in nh.attempts if a.exit_code is not None and before.get(a.n) is None]


def _evaluator_changes(prev: SideSnapshot, new: SideSnapshot) -> list[Change]:
    side = new.name
    pe, ne = prev.evaluator, new.evaluator
    n_att = ne.harness.attempt if ne.harness is not None else None
    most = new.side.evaluator.max_attempts
    out: list[Change] = []
    phase_changed = pe.phase != ne.phase or pe.verdict.state is not ne.verdict.state
    for rec in _exits(prev, new):
        word = "finished" if rec.exit_code == 0 else "crashed"
        text = f"evaluator attempt {rec.n} exited: exit code {rec.exit_code}"
        if rec.exit_code == 0:
            text += " (a clean finish)"
        elif n_att is not None and n_att > rec.n:
            text += f"; the harness started attempt {n_att}/{most}"
        elif ne.phase == "restarting":
            text += f"; the harness restarts it ({rec.n}/{most} attempts used)"
        elif ne.phase == "stopped" and ne.harness is not None:
            text += f"; the harness stopped: {ne.harness.status}" + (f" ({ne.harness.detail})" if ne.harness.detail else "")
        out.append(Change(side, word, text))
    if not phase_changed:
        return out
    said = bool(out)
    if ne.phase == "restarting":
        if not said:
            if n_att:
                out.append(Change(side, "restarting", f"evaluator attempt {n_att} gone; the harness restarts it "
                                  f"({n_att}/{most} attempts used)"))
            else:
                out.append(Change(side, "starting", "harness starting: no attempt yet"))
    elif ne.phase == "running":
        pid = ne.chain.evaluator.pid if ne.chain.evaluator is not None else "?"
        out.append(Change(side, "running", f"evaluator running: pid {pid}"
                          + (f", attempt {n_att}/{most}" if n_att else "")))
    elif ne.phase == "finished":
        ds = f", DS {ne.ds:.1f}" if ne.ds is not None else ""
        out.append(Change(side, "finished", f"evaluator finished: {_progress(new)}{ds}"))
    elif ne.phase == "stopped" and not said:
        h = ne.harness
        why = f"{h.status}: {h.detail}" if h is not None and h.detail else (h.status if h is not None else "?")
        out.append(Change(side, "stopped", f"harness stopped ({why})"))
    elif ne.phase == "absent":
        out.append(Change(side, "absent", f"evaluator gone and no harness (was {pe.phase})"))
    elif ne.phase == "unknown":
        out.append(Change(side, "UNKNOWN", f"evaluator UNKNOWN: {ne.verdict.summary}"))
    return out
