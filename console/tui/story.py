"""What changed on a side between two of its snapshots, as event-log lines: the night's story.

The audit trail tells what was *done* (by this console, another one or a harness); this tells what
*happened*: a server that died, a heartbeat that went STALE, an evaluator that exited (with its exit code,
from the harness's attempt records), finished or was stopped, a server left IDLE. One line per change, so
a side that stays STALE for an hour writes one line, not one a poll. No Textual here: the app writes the
lines, the tests call `changes` on hand-built snapshots.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.probes.harness_state import AttemptRecord, HarnessState
from ops.probes.prober import SideSnapshot
from widgets.words import duration


@dataclass(frozen=True)
class Change:
    side: str
    word: str        # the state word the line is about (coloured by the log)
    text: str        # the rest of the line: what, and the evidence


def _attempt(h: HarnessState | None, n: int | None) -> AttemptRecord | None:
    if h is None or n is None:
        return None
    return next((a for a in reversed(h.attempts) if a.n == n), None)


def _exit_text(rec: AttemptRecord | None) -> str:
    if rec is None or rec.exit_code is None:
        return "exit code not recorded yet"
    return f"exit code {rec.exit_code}"


def _progress(s: SideSnapshot) -> str:
    prog = s.evaluator.checkpoint.progress
    return "routes ?/?" if prog is None else f"routes {prog[0]}/{prog[1]}"


def first_look(s: SideSnapshot) -> Change:
    """The line a side gets when this console first sees it (a console started mid-run tells where the
    story stands)."""
    e = s.evaluator
    attempt = e.harness.attempt if e.harness is not None else None
    text = (f"first look: server {s.server.verdict.state.value}, heartbeat {s.heartbeat.beat.value}, "
            f"evaluator {e.verdict.state.value} {e.phase}"
            + (f" attempt {attempt}/{s.side.evaluator.max_attempts}" if attempt else "") + f", {_progress(s)}")
    return Change(s.name, "", text)


def changes(prev: SideSnapshot | None, new: SideSnapshot, *, read_only: bool = False) -> list[Change]:
    if prev is None:
        return [first_look(new)]
    out: list[Change] = []
    side = new.name
    ps, ns = prev.server.verdict, new.server.verdict
    if ps.state is not ns.state:
        out.append(Change(side, ns.state.value, f"server {ns.state.value}: {ns.summary or 'no detail'}"
                          f" (was {ps.state.value})"))
    pb, nb = prev.heartbeat, new.heartbeat
    if pb.beat is not nb.beat:
        if nb.beat.value == "STALE":
            what = f"log quiet for {duration(nb.age_s)} (stall {duration(nb.stall_s)}): hung? r recovers"
        elif nb.beat.value == "FRESH":
            what = f"log written {duration(nb.age_s)} ago"
        elif nb.beat.value == "UNKNOWN":
            what = nb.evidence.error or "cannot stat the log"
        else:
            what = "no log yet"
        out.append(Change(side, nb.beat.value, f"heartbeat {nb.beat.value}: {what} (was {pb.beat.value})"))
    out += _evaluator_changes(prev, new)
    if new.idle and not prev.idle:
        out.append(Change(side, "IDLE", "server renders for nobody: its evaluator is gone"
                          + ("" if read_only else " (x reclaims)")))
    return out


def _evaluator_changes(prev: SideSnapshot, new: SideSnapshot) -> list[Change]:
    side = new.name
    pe, ne = prev.evaluator, new.evaluator
    p_att = pe.harness.attempt if pe.harness is not None else None
    n_att = ne.harness.attempt if ne.harness is not None else None
    out: list[Change] = []
    # A new attempt seen: the one before it ended (its exit code is in the harness's records), even when
    # the restart happened between two polls and the side never showed "restarting".
    if n_att is not None and p_att is not None and n_att > p_att and pe.phase != "restarting":
        out.append(Change(side, "crashed", f"evaluator attempt {p_att} ended: "
                          f"{_exit_text(_attempt(ne.harness, p_att))}; the harness started attempt {n_att}/"
                          f"{new.side.evaluator.max_attempts}"))
        if ne.phase == pe.phase:
            return out
    if pe.phase == ne.phase and pe.verdict.state is ne.verdict.state:
        return out
    if ne.phase == "restarting":
        out.append(Change(side, "restarting", f"evaluator attempt {n_att} exited: "
                          f"{_exit_text(_attempt(ne.harness, n_att))}; the harness restarts it "
                          f"(attempt {n_att}/{new.side.evaluator.max_attempts} used)"))
    elif ne.phase == "running":
        if pe.phase != "restarting" or not out:
            pid = ne.chain.evaluator.pid if ne.chain.evaluator is not None else "?"
            out.append(Change(side, "running", f"evaluator running: pid {pid}"
                              + (f", attempt {n_att}/{new.side.evaluator.max_attempts}" if n_att else "")))
    elif ne.phase == "finished":
        ds = f", DS {ne.ds:.1f}" if ne.ds is not None else ""
        rec = _attempt(ne.harness, n_att)
        out.append(Change(side, "finished", f"evaluator finished: {_progress(new)}{ds}"
                          + (f", {_exit_text(rec)}" if rec is not None else "")))
    elif ne.phase == "stopped":
        h = ne.harness
        why = f"{h.status}: {h.detail}" if h is not None and h.detail else (h.status if h is not None else "?")
        out.append(Change(side, "stopped", f"harness stopped ({why}); last attempt "
                          f"{_exit_text(_attempt(h, n_att))}"))
    elif ne.phase == "absent":
        out.append(Change(side, "absent", f"evaluator gone, no harness (was {pe.phase}); "
                          f"{_exit_text(_attempt(ne.harness, n_att))}"))
    elif ne.phase == "unknown":
        out.append(Change(side, "UNKNOWN", f"evaluator UNKNOWN: {ne.verdict.summary}"))
    return out
