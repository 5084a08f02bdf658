"""ops/probes/lifecycle.derive on every branch: harness state × chain × checkpoint (issue 23)."""
from __future__ import annotations

import pytest

from ops.parse.checkpoint import Checkpoint
from ops.platform.procs import Proc
from ops.probes.chain import Chain, ChainMember
from ops.probes.evaluator import CheckpointReading, EvaluatorProbe
from ops.probes.harness_state import HarnessState
from ops.probes.lifecycle import BEAT_OFF, Lifecycle, derive, watched_beat
from ops.tristate import Beat, State, Verdict


def _proc(pid: int, role: str) -> ChainMember:
    return ChainMember(Proc(pid=pid, ppid=1, create_time=1000.0 + pid, cmdline=("python", role), state="S"), role)


def probe(*, ev: str = "DEAD", harness_alive: bool = False, status: str | None = None,
          progress: tuple[int, int] | None = (3, 10), entry: str = "Started", missing: bool = False,
          detail: str = "") -> EvaluatorProbe:
    members = ()
    if harness_alive:
        members += (_proc(10, "harness"),)
    if ev == "ALIVE":
        members += (_proc(12, "evaluator"),)
    h = None if status is None else HarnessState("A", 10, 1010.0, 3, status=status, detail=detail)
    cp = (CheckpointReading(None, None, missing=True) if missing
          else CheckpointReading(Checkpoint(progress, (), entry), None))
    return EvaluatorProbe(Verdict(State[ev], (), ev), Chain(members), h, harness_alive, cp, "x")


@pytest.mark.parametrize("kw, want", [
    (dict(missing=True), Lifecycle.NOT_STARTED),
    (dict(harness_alive=True, status="starting", missing=True), Lifecycle.STARTING),
    (dict(harness_alive=True, status="resuming"), Lifecycle.STARTING),
    (dict(ev="ALIVE", harness_alive=True, status="running"), Lifecycle.RUNNING),
    (dict(ev="ALIVE"), Lifecycle.RUNNING),                                    # unsupervised evaluator
    (dict(status="finished", progress=(10, 10), entry="Finished"), Lifecycle.FINISHED),
    (dict(status="finished", progress=(7, 10)), Lifecycle.STOPPED),           # exit 0 but routes left
    (dict(progress=(10, 10), entry="Finished"), Lifecycle.FINISHED),          # no harness: the checkpoint
    (dict(progress=(10, 10), entry="Crashed"), Lifecycle.STOPPED),            # complete, not clean
    (dict(status="stopped"), Lifecycle.STOPPED),
    (dict(status="failed", detail="3 attempts used"), Lifecycle.GAVE_UP),
    (dict(status="gave_up"), Lifecycle.GAVE_UP),
    (dict(status="refused"), Lifecycle.GAVE_UP),
    (dict(status="running"), Lifecycle.STOPPED),                              # harness vanished (kill -9)
    (dict(ev="UNKNOWN", status="running"), Lifecycle.UNKNOWN),
])
def test_derive(kw: dict, want: Lifecycle) -> None:
    got = derive(probe(**kw))
    assert got.state is want, got
    assert got.reason


def test_harness_gone_under_a_running_evaluator_says_unsupervised() -> None:
    got = derive(probe(ev="ALIVE", status="running"))
    assert got.state is Lifecycle.RUNNING and "unsupervised" in got.reason


def test_heartbeat_is_watched_only_while_running() -> None:
    assert watched_beat(Lifecycle.RUNNING, Beat.STALE) == "STALE"
    assert watched_beat(Lifecycle.UNKNOWN, Beat.STALE) == "STALE"
    for lc in (Lifecycle.FINISHED, Lifecycle.STOPPED, Lifecycle.GAVE_UP, Lifecycle.STARTING, Lifecycle.NOT_STARTED):
        assert watched_beat(lc, Beat.STALE) == BEAT_OFF
