"""The SLURM engine on a real one-node cluster (tests/support/slurm.py): the sim rig's sides as jobs.

- sides RUNNING as one job array with a throttle, each job's server and harness on the node, with the
  GPU of its allocation; `status --json` shows the job; `sim down` leaves nothing in squeue;
- a hung side's job cancelled by its exact id and replaced, while the other sides' jobs run on;
- a job killed from outside requeued within the budget (same id, new submit time), then refused once the
  budget is spent;
- a console started later rediscovers the jobs (a fresh engine over the same rig finds them by name).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from console.cli import sim as sim_cli
from ops.actions.guard import Confirmation
from ops.config import load_config
from ops.engines import engine_for
from ops.engines.overlay import read_job_record
from ops.rig import open_rig
from ops.tristate import State
from tests.support.slurm import Cluster, available, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

ROUTE_S = 60.0          # long routes: no run finishes during a test
CONF = Confirmation(True, "test")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = available()
    if why:
        pytest.fail(why, pytrace=False)
    c = Cluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slurm_env(cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)   # the heartbeat must work without it
    return cluster


def up(d, sides, **kw):
    return load_config(sim_cli.up_slurm(d, sides, route_s=ROUTE_S, **kw))


def observe(rig):
    async def go():
        async with open_rig(rig) as live:
            return (await engine_for(rig, live.hosts).observe(live)).runs
    return asyncio.run(go())


def running_sides(rig) -> dict[str, str]:
    """side -> job id, for the sides whose job is RUNNING and whose run is up on the node."""
    out = {}
    for s, r in observe(rig).items():
        rec = read_job_record(rig, s) or {}
        if r.word == "RUNNING" and rec.get("status") == "running":
            out[s] = r.job.job_id
    return out


def down_clean(d, rig, cluster):
    sim_cli.down(d)
    names = {f"cc.{rig.name}", *(f"cc.{rig.name}.{s}" for s in rig.sides)}
    live = [line for line in cluster.run("squeue", "-h", "-o", "%i %j").stdout.splitlines()
            if line.split()[1] in names]
    assert live == [], f"jobs left in squeue after sim down: {live}"
    wait_for(lambda: not cluster.steps_busy(), 60, "job steps gone after sim down")


def test_sides_run_as_a_throttled_array_and_sim_down_leaves_nothing(slurm_env, tmp_path):
    d = tmp_path / "rig"
    rig = up(d, ["A", "B", "C"], throttle=2)
    try:
        wait_for(lambda: len(running_sides(rig)) == 2, 120, "two of three sides RUNNING")
        runs = observe(rig)
        words = sorted(r.word for r in runs.values())
        assert words == ["PENDING", "RUNNING", "RUNNING"], words     # %2: the third waits its turn
        pending = next(r for r in runs.values() if r.word == "PENDING")
        assert "JobArrayTaskLimit" in pending.evidence[0].detail
        # Each running job took its GPU from the allocation and its ports on the node.
        recs = [read_job_record(rig, s) for s in running_sides(rig)]
        assert sorted(r["adapter"] for r in recs) == sorted(int(r["gpus"]) for r in recs)
        assert len({r["rpc_port"] for r in recs}) == 2
        # status --json from a new process: the job, and the server probed at the job's port.
        out = subprocess.run([sys.executable, "-m", "console", "-c", rig.path, "status", "--json", "--no-rpc"],
                             capture_output=True, text=True, timeout=120, env=os.environ.copy())
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["engine"] == "slurm"
        for s, j in data["sides"].items():
            assert j["job"]["state"] in ("RUNNING", "PENDING"), j["job"]
            if j["job"]["state"] == "RUNNING" and (read_job_record(rig, s) or {}).get("status") == "running":
                assert j["server"]["ports"]["rpc"] == read_job_record(rig, s)["rpc_port"]
    finally:
        down_clean(d, rig, slurm_env)


def test_hung_side_is_cancelled_by_exact_id_and_replaced_while_others_run(slurm_env, tmp_path):
    from sim import rig as sim

    d = tmp_path / "rig"
    rig = up(d, ["A", "B", "C"])
    try:
        wait_for(lambda: len(running_sides(rig)) == 3, 120, "three sides RUNNING")
        before = running_sides(rig)

        async def recover(side):
            async with open_rig(rig) as live:
                return await engine_for(rig, live.hosts).recover(live, side, CONF)

        # A is healthy: the guard refuses (heartbeat FRESH), nothing is cancelled.
        outcome, started = asyncio.run(recover("A"))
        assert not outcome.ok and "heartbeat" in (outcome.refused or "") and started == []

        sim.inject(d, "B", "hang")

        def stale():
            async def go():
                async with open_rig(rig) as live:
                    live.follow_jobs()
                    return (await live.prober.side("B", rpc=False)).heartbeat.beat.value
            return asyncio.run(go()) == "STALE"
        wait_for(stale, 120, "side B's heartbeat STALE")
        outcome, started = asyncio.run(recover("B"))
        assert outcome.ok, outcome.detail
        assert f"job {before['B']}: cancelled" in outcome.detail
        assert [s.ok for s in started] == [True]
        assert slurm_env.job_field(before["B"], "JobState") == "CANCELLED"
        wait_for(lambda: running_sides(rig).get("B") not in (None, before["B"]), 120, "B replaced and RUNNING")
        after = running_sides(rig)
        assert after["A"] == before["A"] and after["C"] == before["C"]   # the others ran on, untouched
        assert slurm_env.job_field(after["B"], "JobName") == f"cc.{rig.name}.B"
        audit = [json.loads(line) for line in (d / "state" / "audit.jsonl").read_text().splitlines()]
        done = [a for a in audit if a["operation"] == "recover-job" and a["outcome"] == "done"]
        assert [t["job_id"] for t in done[-1]["targets"]] == [before["B"]]
        refused = [a for a in audit if a["operation"] == "recover-job" and a["outcome"] == "refused"]
        assert refused and refused[0]["side"] == "A"
    finally:
        down_clean(d, rig, slurm_env)


def test_job_killed_from_outside_is_requeued_within_the_budget(slurm_env, tmp_path):
    d = tmp_path / "rig"
    rig = up(d, ["A"], requeue_budget=1)

    def keep():
        async def go():
            async with open_rig(rig) as live:
                return await engine_for(rig, live.hosts).keep(live, Confirmation(True, "requeue-policy"))
        return asyncio.run(go())

    def kill_from_outside() -> int:
        rec = read_job_record(rig, "A")
        os.kill(int(rec["pid"]), signal.SIGKILL)    # the job's batch step: SLURM sees the job fail
        return int(rec["pid"])

    def strays() -> list[int]:
        """Processes of this rig still running outside any job: a probe the killed job-run had in flight
        (started in its own session, so SLURM's tracking lost it with its parent) ends within its own
        timeout; wait for that before the next step, so that no test leaves a process behind."""
        mark, out = str(d).encode(), []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if mark in f.read():
                        out.append(int(pid))
            except OSError:
                continue
        return out

    def rerun_up(killed: int) -> bool:
        rec = read_job_record(rig, "A") or {}
        return running_sides(rig).get("A") == jid and rec.get("pid") != killed and rec.get("restart") == 1

    try:
        wait_for(lambda: "A" in running_sides(rig), 120, "side A RUNNING")
        jid = running_sides(rig)["A"]
        submitted = slurm_env.job_field(jid, "SubmitTime")
        assert keep() == []                                  # nothing lost: nothing to do
        killed = kill_from_outside()
        wait_for(lambda: slurm_env.job_field(jid, "JobState") == "FAILED", 60, "job FAILED")
        wait_for(lambda: not strays(), 60, "the killed job's in-flight probes ended")
        [outcome] = keep()
        assert outcome.ok, outcome.refused or outcome.detail
        wait_for(lambda: rerun_up(killed), 300, "the same job RUNNING again, its run restarted on the node",
                 lambda: f"\njob record: {read_job_record(rig, 'A')}\nsides: {running_sides(rig)}"
                         + slurm_env.job_diag(jid))
        assert slurm_env.job_field(jid, "Restarts") == "1"
        assert slurm_env.job_field(jid, "SubmitTime") != submitted

        # The budget (1) is spent: a second loss is refused, with the reason, and audited.
        kill_from_outside()
        wait_for(lambda: slurm_env.job_field(jid, "JobState") == "FAILED", 60, "job FAILED again")
        wait_for(lambda: not strays(), 60, "the killed job's in-flight probes ended")
        [outcome] = keep()
        assert not outcome.ok and "budget" in (outcome.refused or "")
        assert slurm_env.job_field(jid, "JobState") == "FAILED"
    finally:
        down_clean(d, rig, slurm_env)


def test_a_later_console_rediscovers_the_jobs(slurm_env, tmp_path):
    d = tmp_path / "rig"
    rig = up(d, ["A", "B"])
    try:
        wait_for(lambda: len(running_sides(rig)) == 2, 120, "two sides RUNNING")
        first = running_sides(rig)
        # A new process, knowing only the rig file: the same jobs, by name and array record.
        out = subprocess.run([sys.executable, "-m", "console", "-c", rig.path, "jobs", "--json"],
                             capture_output=True, text=True, timeout=120, env=os.environ.copy())
        assert out.returncode == 0, out.stderr
        sides = json.loads(out.stdout)["sides"]
        assert {s: v["targets"][0]["job_id"] for s, v in sides.items()} == first
        assert all(v["word"] == "RUNNING" and v["state"] == State.ALIVE.value for v in sides.values())
    finally:
        down_clean(d, rig, slurm_env)
