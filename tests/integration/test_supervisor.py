"""The supervisor in the detached harness (issue 15): it recovers a stalled evaluator and a dead or hung
server by itself, through the guard, under the side's policy; budgets stop it cleanly (GAVE_UP).

Real processes throughout (sim servers, fake conda, fake evaluator, real carla client); every wait is on a
condition. A short evaluator client timeout makes a dead or hung server end the attempt in seconds.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from sim import rig as sim
from tests.support.evalops_sim import alive, checkpoint, cli, done_records, harness_state, sim_rig, wait_until

AUTO = {"auto": True, "watch_s": 0.5, "max_recoveries": 5, "max_route_recoveries": 3,
        "server_restarts_per_hour": 3, "quarantine_after": 0}


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)   # heartbeat tests run as an operator's shell would


def _audit(d: Path) -> list[dict]:
    path = d / "state" / "audit.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def _events(d: Path, side: str = "A") -> list[dict]:
    path = d / "state" / "sides" / side / "events.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def _kinds(d: Path, side: str = "A") -> list[str]:
    return [e["kind"] for e in _events(d, side)]


def _server(rig_yaml: Path, side: str = "A", **kw) -> None:
    data = yaml.safe_load(rig_yaml.read_text())
    data["sides"][side]["server"].update(kw)
    data["sides"][side]["evaluator"]["max_attempts"] = 10
    rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))


def _running(d: Path, attempt: int, timeout: float = 40) -> dict:
    st = wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] >= attempt and s["status"] == "running"
                    and s, timeout, every=0.2)
    assert st, harness_state(d, "A")
    return st


def test_stalled_evaluator_is_recovered_then_budget_gives_up(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor={**AUTO, "max_recoveries": 1}) as rig_yaml:
        _server(rig_yaml)
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        _running(d, 1)
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= 1, 20)
        first = harness_state(d, "A")["attempts"][0]
        sim.inject(d, "A", "hang")
        # Nobody touches it: stalled → the guided-recovery plan under the policy → attempt 2 resumes.
        assert wait_until(lambda: "recovered" in _kinds(d), 60, every=0.3), _kinds(d)
        st = harness_state(d, "A")
        assert st["recoveries"] == 1 and st["attempt"] == 2 and st["attempts"][1]["resume"] is True
        assert not alive(first["evaluator_pid"], first["evaluator_create_time"])
        stop = [a for a in _audit(d) if a["operation"] == "stop-chain" and a["outcome"] == "done"]
        assert stop and stop[-1]["confirmation"]["via"] == "policy:supervisor.auto"
        assert "harness" not in [t["role"] for t in stop[-1]["targets"]]   # never itself
        assert _kinds(d).index("stalled") < _kinds(d).index("recovering") < _kinds(d).index("recovered")
        rec = next(e for e in _events(d) if e["kind"] == "recovered")
        assert rec["mttr_s"] > 0

        # The second stall finds the recovery budget spent: the chain is stopped cleanly, the side gives up.
        had = len(done_records(checkpoint(d, "A")))
        sim.inject(d, "A", "hang")
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "gave_up" and s, 60)
        assert st and "recovery budget spent" in st["detail"], harness_state(d, "A")
        assert wait_until(lambda: not alive(st["pid"], st["create_time"]), 10)
        snap = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]
        assert snap["lifecycle"] == "GAVE_UP" and snap["supervisor"]["recoveries"] == 1
        assert "recovery budget spent" in snap["lifecycle_reason"]
        assert len(done_records(checkpoint(d, "A"))) >= had, "a record was lost"


def test_route_budget_gives_up(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor={**AUTO, "max_route_recoveries": 0}) as rig_yaml:
        _server(rig_yaml)
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        _running(d, 1)
        sim.inject(d, "A", "hang")
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "gave_up" and s, 60)
        assert st and "route budget spent" in st["detail"], (harness_state(d, "A"), _events(d))


def test_policy_off_wakes_a_human_and_touches_nothing(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor={**AUTO, "auto": False}) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        st = _running(d, 1)
        sim.inject(d, "A", "hang")
        assert wait_until(lambda: "needs-human" in _kinds(d), 40, every=0.3), _kinds(d)
        now = harness_state(d, "A")
        assert now["attempt"] == 1 and now["recoveries"] == 0 and alive(st["pid"], st["create_time"])
        assert not [a for a in _audit(d) if a["operation"] == "stop-chain"]


def test_dead_server_restarted_then_resumed_and_restart_budget(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, eval_timeout_s=2.0,
                 supervisor={**AUTO, "server_restarts_per_hour": 1}) as rig_yaml:
        _server(rig_yaml, adapter_candidates=[0])
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        _running(d, 1)
        sim.inject(d, "A", "server-crash")
        assert wait_until(lambda: "server-restarted" in _kinds(d), 90, every=0.3), _kinds(d)
        _running(d, 2, timeout=60)
        assert ("adapter-poll", "done") in [(a["operation"], a["outcome"]) for a in _audit(d)]
        # A second crash within the hour: the restart budget (1 an hour) is spent, the side gives up.
        sim.inject(d, "A", "server-crash")
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "gave_up" and s, 90)
        assert st and "server restart budget spent" in st["detail"], harness_state(d, "A")


def test_hung_server_stopped_by_exact_pids_and_restarted(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, routes=200, eval_timeout_s=2.0, supervisor=AUTO) as rig_yaml:
        _server(rig_yaml, adapter_candidates=[0], hung_probes=2, hung_after_s=1.0, probe_timeout_s=1.5)
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        _running(d, 1)
        b_server = json.loads(cli(rig_yaml, "status", "--json").stdout)["sides"]["B"]["server"]["pid"]
        sim.inject(d, "A", "server-hang")
        assert wait_until(lambda: "server-restarted" in _kinds(d), 120, every=0.3), _kinds(d)
        _running(d, 2, timeout=60)
        stops = [a for a in _audit(d) if a["operation"] == "stop-hung-server" and a["outcome"] == "done"]
        assert stops and [t["role"] for t in stops[-1]["targets"]] == ["launcher", "server"]
        assert stops[-1]["verdicts"]["server"] == "HUNG"
        after = json.loads(cli(rig_yaml, "status", "--json").stdout)["sides"]
        assert after["B"]["server"]["pid"] == b_server, "the other side's server was touched"
        assert wait_until(lambda: json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
                          ["sides"]["A"]["heartbeat"]["state"] == "FRESH", 30)


def test_status_shows_hung_as_the_supervisor_measured_it(tmp_path: Path) -> None:
    """One `status` probe cannot measure HUNG (K probes over T s): it shows the supervisor's measurement,
    with its evidence and age, while the same server process holds its port and does not answer. Policy
    off: the supervisor measures, wakes a human, and touches nothing."""
    d = tmp_path / "sim"
    with sim_rig(d, routes=200, eval_timeout_s=2.0, supervisor={**AUTO, "auto": False}) as rig_yaml:
        _server(rig_yaml, adapter_candidates=[0], hung_probes=2, hung_after_s=1.0, probe_timeout_s=1.5)
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        _running(d, 1)
        sim.inject(d, "A", "server-hang")
        st = wait_until(lambda: (s := harness_state(d, "A")) and (s.get("server_measure") or {}).get("state") == "HUNG"
                        and s, 90, every=0.3)
        assert st, harness_state(d, "A")
        m = st["server_measure"]
        assert m["silent_probes"] >= 2 and m["silent_last"] - m["silent_since"] >= 1.0, m
        out = cli(rig_yaml, "status", "--json", timeout=120)
        sides = json.loads(out.stdout)["sides"]
        a = sides["A"]["server"]
        assert a["state"] == "HUNG" and a["measured_by"] == "supervisor", a
        assert a["pid"] == m["pid"] and a["supervisor_measure"]["age_s"] >= 0
        assert any("measured HUNG by the supervisor" in e for e in a["evidence"]), a["evidence"]
        assert sides["B"]["server"]["state"] == "ALIVE" and sides["B"]["server"]["measured_by"] == "this probe"
        text = cli(rig_yaml, "status", "--no-rpc", timeout=120).stdout   # no rpc now: still the same process, port up
        assert "A: server HUNG" in text and "measured HUNG by the supervisor" in text, text
        assert "needs-human" in _kinds(d)
        assert not [x for x in _audit(d) if x["operation"] == "stop-hung-server" and x["outcome"] != "refused"]
        # The TUI's pane reads the same (its backend's probe), without an rpc call of its own.
        from console.tui.backend import LiveBackend
        from ops.config import load_config

        async def pane() -> str:
            backend = LiveBackend(load_config(rig_yaml))
            await backend.start()
            try:
                return (await backend.probe("A", rpc=False)).server.verdict.state.value
            finally:
                await backend.close()
        assert asyncio.run(pane()) == "HUNG"
