"""A one-shot reading of a side's server, completed by what its supervisor measured.

HUNG needs K silent rpc probes over T s: a one-shot `status` makes one probe and can only say UNKNOWN. The
side's supervisor (the detached harness) measures the server with that history and keeps its last
measurement in harness.json (HarnessState.server_measure). This shows HUNG, with the supervisor's
evidence and its age, only while the measurement still describes what this probe sees: the same server
process (pid and start time), its port accepting, and no answer now. An answer now (ALIVE), a process gone
(DEAD) or anything this probe could not read keeps this probe's own verdict: fresh evidence wins, and an
old measurement of another process says nothing. Display only: a plan measures afresh (restart_server).
"""
from __future__ import annotations

from dataclasses import replace

from ops.probes.prober import SideSnapshot
from ops.probes.server import ServerMeasure
from ops.tristate import Evidence, State, Verdict

SAME_START_S = 0.05   # start times of one process read twice agree to this (as the guard's identity check)


def applies(measure: ServerMeasure | None, snap: SideSnapshot) -> bool:
    """The supervisor's HUNG still describes this probe's server (see the module docstring)."""
    s = snap.server
    return (measure is not None and measure.state == "HUNG" and s.verdict.state is State.UNKNOWN
            and s.port_open is True and s.pid is not None and s.pid == measure.pid
            and s.create_time is not None and measure.create_time is not None
            and abs(s.create_time - measure.create_time) <= SAME_START_S)


def _age(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60:02d} min"


def with_supervisor_measure(snap: SideSnapshot, now: float) -> SideSnapshot:
    """snap, its server verdict HUNG when the supervisor measured it so (else snap unchanged)."""
    h = snap.evaluator.harness
    measure = h.server_measure if h is not None else None
    if measure is None or not applies(measure, snap):
        return snap
    age = now - measure.at
    span = (measure.silent_last - measure.silent_since
            if measure.silent_last is not None and measure.silent_since is not None else None)
    told = (f"measured HUNG by the supervisor (harness pid {h.pid if h else '?'}) {_age(age)} ago: "
            f"{measure.silent_probes} consecutive rpc probes unanswered"
            + (f" over {span:.0f} s" if span is not None else "") + f" by pid {measure.pid}")
    ev = (Evidence("supervisor's measurement", True, detail=told, at=measure.at),
          *(Evidence("supervisor's evidence", True, detail=line, at=measure.at) for line in measure.evidence),
          *snap.server.verdict.evidence)
    summary = f"{measure.summary} (the supervisor, {_age(age)} ago; now: {snap.server.verdict.summary})"
    server = replace(snap.server, verdict=Verdict(State.HUNG, ev, summary), supervisor_measure=measure,
                     supervisor_age_s=age)
    return replace(snap, server=server)
