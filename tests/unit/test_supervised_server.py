"""A one-shot status shows the supervisor's HUNG measurement (issue 15) only while it still describes what
this probe sees: the same process, its port accepting, no answer now. Fresh evidence (ALIVE, DEAD) and
anything unreadable keep the probe's own verdict. The measurement survives harness.json's round trip."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ops.probes.harness_state import HarnessState, parse_state
from ops.probes.server import ServerMeasure, ServerProbe, Silence
from ops.probes.supervised_server import with_supervisor_measure
from ops.tristate import State, Verdict
from tests.tui.fakes import T0, ev, rig_config, snapshot

NOW = T0 + 100


def _measured(snap, *, state: str = "HUNG", pid: int | None = None, create_time: float | None = None,
              at: float = T0 + 40) -> ServerMeasure:
    return ServerMeasure(state, "process and port up, rpc silent in 3 probes over 62 s",  # type: ignore[arg-type]
                         snap.server.pid if pid is None else pid,
                         snap.server.create_time if create_time is None else create_time,
                         3, T0 - 22, T0 + 40, at, ["rpc silence: 3 consecutive rpc probes unanswered over 62 s"])


def _one_shot(*, server: str = "UNKNOWN", port_open: bool | None = True, measure: str = "HUNG", **kw):
    """A side whose probe now says `server`, whose harness state holds a `measure` measurement."""
    cfg = rig_config().sides["A"]
    base = snapshot(cfg, evaluator="DEAD", phase="stopped")
    alive = snapshot(cfg)
    if server == "UNKNOWN":
        sv = replace(alive.server, verdict=Verdict(State.UNKNOWN, (ev("rpc", False, error="timeout"),),
                                                   "accepts but does not answer: timeout"),
                     version=None, silent=True, port_open=port_open)
    elif server == "ALIVE":
        sv = replace(alive.server, port_open=True)
    else:
        sv = ServerProbe(Verdict(State.DEAD, (), "no process, port refused"), port_open=False)
    snap = replace(base, server=sv)
    h = HarnessState("A", 5010, T0 - 900, 3, status="refused", server_measure=_measured(snap, state=measure, **kw))
    return replace(snap, evaluator=replace(snap.evaluator, harness=h))


def test_status_shows_the_supervisors_hung_with_its_evidence_and_age() -> None:
    snap = _one_shot()
    out = with_supervisor_measure(snap, NOW)
    assert out.server.verdict.state is State.HUNG
    first = out.server.verdict.evidence[0]
    assert "measured HUNG by the supervisor (harness pid 5010) 60 s ago" in first.detail
    assert "3 consecutive rpc probes unanswered over 62 s" in first.detail
    assert "now: accepts but does not answer" in out.server.verdict.summary
    j = out.to_json()["server"]
    assert j["state"] == "HUNG" and j["measured_by"] == "supervisor"
    assert j["supervisor_measure"]["age_s"] == 60.0 and j["supervisor_measure"]["silent_probes"] == 3
    assert snap.to_json()["server"]["measured_by"] == "this probe"       # unchanged input: as today


@pytest.mark.parametrize("case,kw", [
    ("it answers now", {"server": "ALIVE"}),
    ("it is gone now", {"server": "DEAD"}),
    ("its port does not accept now", {"port_open": False}),
    ("the port could not be checked", {"port_open": None}),
    ("another process holds the port", {"pid": 99999}),
    ("a restarted process with the same pid", {"create_time": T0 - 10_000}),
    ("the supervisor could not measure", {"measure": "UNKNOWN"}),
    ("the supervisor saw it answer", {"measure": "ALIVE"}),
])
def test_fresh_evidence_or_another_process_keeps_the_one_shot_verdict(case: str, kw: dict) -> None:
    snap = _one_shot(**kw)
    out = with_supervisor_measure(snap, NOW)
    assert out is snap, case


def test_no_harness_state_keeps_the_one_shot_verdict() -> None:
    snap = _one_shot()
    bare = replace(snap, evaluator=replace(snap.evaluator, harness=None))
    assert with_supervisor_measure(bare, NOW) is bare


def test_the_measurement_survives_harness_json() -> None:
    snap = _one_shot()
    h = snap.evaluator.harness
    assert h is not None
    back = parse_state(json.loads(json.dumps(h.to_json())))
    assert back.server_measure == h.server_measure
    data = h.to_json()
    data["server_measure"]["state"] = "WEDGED"
    with pytest.raises(ValueError, match="server_measure.state"):
        parse_state(data)
    old = h.to_json()
    del old["server_measure"]               # a state written before this field: still readable
    assert parse_state(old).server_measure is None


def test_a_measure_names_the_silence_of_its_own_process_only() -> None:
    snap = _one_shot()
    pid, ct = snap.server.pid, snap.server.create_time
    assert pid is not None and ct is not None
    m = ServerMeasure.of(snap.server, Silence(pid, ct, T0, T0 + 61, 3), T0 + 62)
    assert (m.state, m.silent_probes, m.silent_since, m.silent_last) == ("UNKNOWN", 3, T0, T0 + 61)
    other = ServerMeasure.of(snap.server, Silence(pid + 1, ct, T0, T0 + 61, 3), T0 + 62)
    assert (other.silent_probes, other.silent_since) == (0, None)
