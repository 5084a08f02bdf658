"""A side's lifecycle on the sim (issue 23): a finished side is not a hung one.

- a side that finishes reads FINISHED, never STALE, once its log has been quiet longer than stall_s;
  its server is IDLE (reclaimable);
- a side stopped by the operator (`stop SIDE`, through the guard) reads STOPPED;
- a side whose budget is spent (max_attempts crashes) reads GAVE_UP;
- a hung running side still reads RUNNING and STALE.
Every wait is on a condition; the quiet-log condition is the heartbeat's own measurement turning STALE.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim import rig as sim
from tests.support.evalops_sim import REPO, alive, cli, harness_state, sim_rig, wait_until


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    # Heartbeat tests run as an operator's shell would: this machine exports PYTHONUNBUFFERED=1.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


def status(rig_yaml: Path, *extra: str) -> dict:
    out = cli(rig_yaml, "status", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["sides"]


def inject(d: Path, side: str, fault: str) -> None:
    subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), side, fault],
                   cwd=REPO, check=True, capture_output=True)


def quiet(rig_yaml: Path, side: str, rpc: bool = False) -> dict:
    """The side's status once its log has been quiet past stall_s (the raw measurement says STALE)."""
    got = wait_until(lambda: (s := status(rig_yaml, *(() if rpc else ("--no-rpc",)))[side])["heartbeat"]["measured"]
                     == "STALE" and s, 30, every=0.5)
    assert got, status(rig_yaml, "--no-rpc")[side]
    return got


def test_finished_side_reads_finished_not_stale_and_its_server_idle(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        assert status(rig_yaml, "--no-rpc")["A"]["lifecycle"] == "NOT_STARTED"
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        assert wait_until(lambda: status(rig_yaml, "--no-rpc")["A"]["lifecycle"] == "RUNNING", 20)
        inject(d, "A", "finish")
        assert wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "finished", 20)
        s = quiet(rig_yaml, "A", rpc=True)
        assert s["lifecycle"] == "FINISHED", s
        assert s["heartbeat"]["state"] == "OFF" and s["heartbeat"]["measured"] == "STALE"
        assert s["idle"] is True and s["server"]["state"] == "ALIVE"
        human = cli(rig_yaml, "status", "--no-rpc")
        row = human.stdout.splitlines()[1].split()
        assert row[:2] == ["A", "FINISHED"] and "STALE" not in human.stdout, human.stdout
        # A recovery of a finished side is refused (nothing is running), and audited as a refusal.
        rec = cli(rig_yaml, "recover", "A", "--yes", "--json")
        assert rec.returncode == 3, rec.stdout


def test_operator_stop_reads_stopped(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=40) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        assert wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running", 20)
        out = cli(rig_yaml, "stop", "A", "--yes", "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        roles = [t["role"] for t in json.loads(out.stdout)["targets"]]
        assert roles[0] == "harness" and "evaluator" in roles
        st = harness_state(d, "A")
        assert st["status"] == "stopped" and not alive(st["pid"], st["create_time"])
        s = quiet(rig_yaml, "A")
        assert s["lifecycle"] == "STOPPED" and s["heartbeat"]["state"] == "OFF", s
        audit = [json.loads(ln) for ln in (d / "state" / "audit.jsonl").read_text().splitlines()]
        assert any(a["operation"] == "stop-run" and a["outcome"] == "done" for a in audit)
        # Nothing left to stop: refused (3), and that refusal has its audit line too.
        assert cli(rig_yaml, "stop", "A", "--yes").returncode == 3


def test_budget_spent_reads_gave_up(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=40) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        for n in (1, 2, 3):   # the sim's rig.yaml sets max_attempts: 3
            assert wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] == n
                              and s["status"] == "running", 20), harness_state(d, "A")
            inject(d, "A", "crash")
        assert wait_until(lambda: (s := harness_state(d, "A")) and s["status"] in ("failed", "gave_up"), 20)
        s = quiet(rig_yaml, "A")
        assert s["lifecycle"] == "GAVE_UP" and s["heartbeat"]["state"] == "OFF", s
        assert "attempt budget spent: 3 of 3" in s["lifecycle_reason"], s


def test_hung_running_side_still_reads_stale(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=40) as rig_yaml:
        sim.start_evaluator(d, "A")   # unsupervised: nothing recovers it behind the test's back
        assert wait_until(lambda: status(rig_yaml, "--no-rpc")["A"]["heartbeat"]["state"] == "FRESH", 20)
        inject(d, "A", "hang")
        s = quiet(rig_yaml, "A")
        assert s["lifecycle"] == "RUNNING" and s["heartbeat"]["state"] == "STALE", s
        assert cli(rig_yaml, "status", "--no-rpc").stdout.splitlines()[1].split()[:2] == ["A", "RUNNING"]
