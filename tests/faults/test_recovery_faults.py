"""Recovery under faults, on one sim rig whose two sides run under real harnesses (launch --yes).

A: hung evaluator (alive, silent) → STALE → `recover --yes`: exactly the chain (harness → wrapper →
   evaluator) stops, the side resumes from its checkpoint, FRESH again.
B: the console SIGKILLed right after its first TERM landed (the harness, outer-most target): a second run
   is safe — it finishes what is left of the same chain or refuses cleanly — and nothing outside the
   first plan is ever touched.
The sides cannot interfere: each scenario acts on its own side's chain only (and checks exactly that).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.common import dry_plan, inject, status, wait_stale
from tests.faults.harness_kit import Audit, Procs, Records, alive, backups, checkpoint_path, plan_keys
from tests.support.evalops_sim import REPO, cli, harness_state, sim_rig, wait_until

STATE: dict = {}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    d = tmp_path_factory.mktemp("faultsrecover") / "sim"
    # Enough routes that no side finishes during the module on a loaded machine: a finished side's evaluator
    # vanishes (outside any plan) and its heartbeat is OFF, never STALE (issue 23).
    with sim_rig(d, routes=400, route_s=1.0, tick_s=0.2, stall_s=2.0) as rig_yaml:
        for side in ("A", "B"):
            res = cli(rig_yaml, "launch", side, "--yes")
            assert res.returncode == 0, res.stdout + res.stderr
        yield d, rig_yaml


def _records(d: Path) -> Records:
    return Records({s: checkpoint_path(d, s) for s in ("A", "B")})


@pytest.mark.scenario("hung-evaluator")
def test_hung_evaluator_goes_stale_and_is_recovered(rig) -> None:
    d, rig_yaml = rig
    rec = _records(d)
    assert rec.watch(lambda: (rec.high.get("A") or 0) >= 1, 20), "A recorded no route"
    inject(d, "A", "hang")
    snap = wait_stale(rig_yaml, "A")
    assert snap["evaluator"]["state"] == "ALIVE"          # alive and silent: exit-code supervision never fires
    assert status(rig_yaml, "--no-rpc")["B"]["heartbeat"]["state"] == "FRESH"
    rec.sample()
    hung = rec.high["A"]

    plan = dry_plan(rig_yaml, "A")
    assert [t["role"] for t in plan["kill_plan"]] == ["harness", "wrapper", "shell", "evaluator"]
    assert plan["verdict"] == {"heartbeat": "STALE", "server": "ALIVE", "evaluator": "ALIVE"}
    planned = plan_keys(plan["kill_plan"])
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()

    res = cli(rig_yaml, "recover", "A", "--yes", "--json", timeout=150)
    assert res.returncode == 0, res.stdout + res.stderr
    run = json.loads(res.stdout)
    assert plan_keys(run["kill_plan"]) == planned
    assert {s["name"]: s["status"] for s in run["steps"]}["wait-fresh"] == "done", run["steps"]
    assert not any(alive(k) for k in planned)
    Procs.check(before, planned)
    audit.need(mark, "stop-chain", "done", planned)
    audit.need(mark, "relaunch", "done")
    # Resumed, not restarted: the records of before the hang are kept, a backup was made, and it moves on.
    assert run["launch"]["backup"] and backups(d, "A")
    assert rec.watch(lambda: rec.high["A"] > hung, 20), "A made no progress after the recovery"
    assert status(rig_yaml, "--no-rpc")["A"]["heartbeat"]["state"] == "FRESH"
    rec.check()


@pytest.mark.scenario("console-killed-mid-plan")
def test_console_killed_mid_kill_plan_then_a_second_run_is_safe(rig) -> None:
    d, rig_yaml = rig
    rec = _records(d)
    assert rec.watch(lambda: (rec.high.get("B") or 0) >= 1, 20), "B recorded no route"
    inject(d, "B", "hang")
    wait_stale(rig_yaml, "B")
    plan = dry_plan(rig_yaml, "B")
    assert [t["role"] for t in plan["kill_plan"]] == ["harness", "wrapper", "shell", "evaluator"]
    first = plan_keys(plan["kill_plan"])
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()

    console = subprocess.Popen([sys.executable, "-m", "console", "-c", str(rig_yaml), "recover", "B", "--yes",
                                "--json"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        # The harness is the first target: the moment it is gone, the first TERM has landed.
        assert wait_until(lambda: not alive(first[0]) or console.poll() is not None, 60, every=0.002)
        os.killpg(console.pid, signal.SIGKILL)            # the console and any probe it was running
    finally:
        if console.poll() is None:
            os.killpg(console.pid, signal.SIGKILL)
        console.wait(10)
    assert console.returncode == -signal.SIGKILL, "the console finished before it could be killed"
    left = [k for k in first if alive(k)]
    STATE.update(mark=mark, first=first, left=left, d=d)

    second = cli(rig_yaml, "recover", "B", "--yes", "--json", timeout=150)
    out = json.loads(second.stdout)
    if second.returncode == 0:
        # It finished the job: its plan is what was left of the first one, nothing else.
        assert set(plan_keys(out["kill_plan"])) <= set(first), (out["kill_plan"], first)
        audit.need(mark, "stop-chain", "done", plan_keys(out["kill_plan"]))
    else:
        # It refused cleanly: exit 3, a stated reason, nothing signalled.
        assert second.returncode == 3 and out["refused"], second.stdout + second.stderr
        assert not left or out["kill_plan"] == [], out
        assert left == [k for k in first if alive(k)]
        # The operator's way on: a launch resumes the side from its checkpoint.
        res = cli(rig_yaml, "launch", "B", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
    assert not any(alive(k) for k in first), "a process of the first plan survived both runs"
    Procs.check(before, first)
    new = wait_until(lambda: (s := harness_state(d, "B")) and s["status"] == "running" and s, 15)
    assert new and (new["pid"], round(new["create_time"], 2)) not in first
    assert backups(d, "B")
    hi = rec.high["B"]
    assert rec.watch(lambda: rec.high["B"] > hi, 20), "B made no progress after the second run"
    rec.check()


@pytest.mark.scenario("console-killed-mid-plan: audit line for the TERM it sent")
def test_console_killed_mid_kill_plan_left_an_audit_line() -> None:
    assert STATE, "the console-killed scenario did not run"
    lines = Audit(STATE["d"] / "state").since(STATE["mark"])
    killed_pid_lines = [ln for ln in lines if ln.get("operation") == "stop-chain"
                        and STATE["first"][0] in {(t["pid"], round(t["create_time"], 2)) for t in ln["targets"]}]
    assert killed_pid_lines, "the first run's TERM to the harness has no audit line"
