"""A side's lifecycle: where its run stands, as opposed to how its processes measure right now.

    NOT_STARTED  no run yet: no harness state, no evaluator process, no checkpoint
    STARTING     the harness (supervisor) is alive and no evaluator runs yet: planning, adapter polling,
                 between attempts, recovering
    RUNNING      an evaluator process of this side exists (supervised or not)
    FINISHED     nothing runs and the run ended cleanly: progress[0] == progress[1] with a clean end
                 (the harness saw exit 0, or the checkpoint's entry_status is Finished)
    STOPPED      nothing runs and the run did not finish: the operator (or a signal) stopped it, its
                 harness vanished without a last word, or an unsupervised evaluator ended early
    GAVE_UP      the supervisor stopped by itself: a budget was spent, or it refused to go on (the reason
                 is its detail)
    UNKNOWN      the process table could not be read: which of the above is not measured

The heartbeat (the log's age) means something only while RUNNING: a finished or stopped side's log is
quiet by nature, so it is never STALE, never recovered and never notified as stalled (`watched_beat`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ops.probes.evaluator import EvaluatorProbe
from ops.tristate import Beat, State


class Lifecycle(StrEnum):
    NOT_STARTED = "NOT_STARTED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    STOPPED = "STOPPED"
    GAVE_UP = "GAVE_UP"
    UNKNOWN = "UNKNOWN"


# The word a heartbeat shows when it means nothing (the side is not running).
BEAT_OFF = "OFF"

# Harness statuses (ops/probes/harness_state.py) that are a last word: the harness wrote them and exits.
GAVE_UP_STATUSES = frozenset({"gave_up", "failed", "refused"})
FINAL_STATUSES = GAVE_UP_STATUSES | {"finished", "stopped"}


@dataclass(frozen=True)
class LifecycleReading:
    state: Lifecycle
    reason: str

    def to_json(self) -> dict:
        return {"state": self.state.value, "reason": self.reason}


def _progress_text(ev: EvaluatorProbe) -> str:
    cp = ev.checkpoint.checkpoint
    if cp is None or cp.progress is None:
        return "no checkpoint" if ev.checkpoint.missing else "checkpoint unreadable"
    return f"checkpoint {cp.progress[0]}/{cp.progress[1]}"


def _complete(ev: EvaluatorProbe) -> bool:
    cp = ev.checkpoint.checkpoint
    return cp is not None and cp.progress is not None and cp.progress[1] > 0 and cp.progress[0] == cp.progress[1]


def derive(ev: EvaluatorProbe) -> LifecycleReading:
    """The lifecycle from the harness's state file, the process table (the chain) and the checkpoint."""
    h = ev.harness
    status = h.status if h is not None else None
    if ev.verdict.state is State.UNKNOWN:
        return LifecycleReading(Lifecycle.UNKNOWN, ev.verdict.summary)
    if ev.verdict.state is State.ALIVE:
        if h is not None and not ev.harness_alive and status not in FINAL_STATUSES:
            return LifecycleReading(Lifecycle.RUNNING, f"evaluator pid {ev.pid}; its harness {h.pid} is gone: "
                                    "unsupervised")
        return LifecycleReading(Lifecycle.RUNNING, f"evaluator pid {ev.pid}")
    # No evaluator process.
    complete = _complete(ev)
    clean_cp = complete and ev.checkpoint.checkpoint is not None and ev.checkpoint.checkpoint.entry_status == "Finished"
    if ev.harness_alive and status not in FINAL_STATUSES:
        return LifecycleReading(Lifecycle.STARTING, (h.detail if h is not None and h.detail else "harness up, "
                                                     "no evaluator yet"))
    if h is not None:
        if status == "finished":
            if complete:
                return LifecycleReading(Lifecycle.FINISHED, f"exit 0, {_progress_text(ev)}")
            if h.retired:   # the routes left are the ones the supervisor retired: they count as failed
                return LifecycleReading(Lifecycle.FINISHED, f"exit 0, {_progress_text(ev)}, {len(h.retired)} "
                                        f"retired ({', '.join(h.retired)})")
            return LifecycleReading(Lifecycle.STOPPED, f"exit 0 but {_progress_text(ev)}")
        if status in GAVE_UP_STATUSES:
            return LifecycleReading(Lifecycle.GAVE_UP, h.detail or status)
        if status == "stopped":
            return LifecycleReading(Lifecycle.STOPPED, h.detail or "stopped")
        if clean_cp:
            return LifecycleReading(Lifecycle.FINISHED, f"{_progress_text(ev)}, entry_status Finished")
        return LifecycleReading(Lifecycle.STOPPED, f"harness {h.pid} gone while {status} (killed?), "
                                f"{_progress_text(ev)}")
    if clean_cp:
        return LifecycleReading(Lifecycle.FINISHED, f"{_progress_text(ev)}, entry_status Finished")
    if ev.checkpoint.missing:
        return LifecycleReading(Lifecycle.NOT_STARTED, "no harness state, no evaluator, no checkpoint")
    return LifecycleReading(Lifecycle.STOPPED, f"no evaluator running, {_progress_text(ev)}")


def watched_beat(lifecycle: Lifecycle, beat: Beat) -> str:
    """The heartbeat word to show and act on: the measurement while the side runs (or when the lifecycle
    itself is unknown), OFF otherwise."""
    if lifecycle in (Lifecycle.RUNNING, Lifecycle.UNKNOWN):
        return beat.value
    return BEAT_OFF
