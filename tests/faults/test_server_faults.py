"""Server-side faults, each on its own sim rig: an idle server after a side finishes (IDLE → reclaim),
the probe env without `carla` (UNKNOWN → nothing destructive), and the wrong adapter (no VRAM rise, and
a crash) during adapter polling."""
from __future__ import annotations

import asyncio
import json

import pytest

from ops.actions.adapter import ACCEPTED, CRASHED, NO_RISE
from ops.actions.guard import Confirmation
from ops.actions.recovery import execute_kill, recovery_plan
from ops.config import load_config
from ops.rig import open_rig
from sim import install
from sim import rig as sim
from tests.faults.common import inject, rewrite, status, wait_stale
from tests.faults.harness_kit import Audit, Procs, Records, checkpoint_path, plan_keys
from tests.integration.test_adapter import CRASH_ROOM_S, _configure, marker_procs
from tests.support.evalops_sim import cli, sides, wait_until


@pytest.fixture
def rig(tmp_path):
    d = tmp_path / "sim"
    rig_yaml = sim.up(d, start_evaluators=True, routes=60, route_s=1.0, tick_s=0.2, stall_s=2.0)
    try:
        yield d, rig_yaml
    finally:
        sim.down(d)


@pytest.mark.scenario("idle-server-reclaim")
def test_finished_side_idle_server_is_reclaimed(rig) -> None:
    d, rig_yaml = rig
    rec = Records({s: checkpoint_path(d, s) for s in ("A", "B")})
    inject(d, "B", "finish")
    snap = wait_until(lambda: (s := status(rig_yaml))["B"]["idle"] and s, 30, every=0.5)
    assert snap, "B never became IDLE after finishing"
    assert snap["B"]["server"]["state"] == "ALIVE" and snap["B"]["evaluator"]["state"] == "DEAD"
    assert snap["A"]["idle"] is False
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()
    res = cli(rig_yaml, "reclaim", "B", "--yes", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert [t["role"] for t in out["targets"]] == ["launcher", "server"]
    planned = plan_keys(out["targets"])
    Procs.check(before, planned)
    audit.need(mark, "reclaim", "done", planned)
    # DEAD needs positive evidence (the port refusing too): probe until it is there, with a deadline, and
    # until A's beat has been read FRESH (one probe on a loaded machine can land between two of its ticks).
    after: dict = {}

    def settled() -> bool:
        after.update(status(rig_yaml))
        return after["B"]["server"]["state"] == "DEAD" and after["A"]["heartbeat"]["state"] == "FRESH"
    wait_until(settled, 30)
    assert after["B"]["server"]["state"] == "DEAD" and after["B"]["idle"] is False, after["B"]
    assert after["A"]["server"]["state"] == "ALIVE" and after["A"]["heartbeat"]["state"] == "FRESH", after["A"]
    rec.check()


@pytest.mark.scenario("probe-env-missing-carla")
def test_probe_env_without_carla_is_unknown_and_nothing_is_killed(rig) -> None:
    d, rig_yaml = rig
    rec = Records({s: checkpoint_path(d, s) for s in ("A", "B")})
    inject(d, "A", "hang")
    inject(d, "B", "finish")
    wait_stale(rig_yaml, "A")
    assert wait_until(lambda: status(rig_yaml)["B"]["idle"], 30, every=0.5)
    # The same rig, but the probes' pinned env lacks `carla` (a bare python3 would too).
    bad = rewrite(rig_yaml, lambda c: [s["evaluator"].update(conda_env=install.ENV_NOCARLA)
                                       for s in c["sides"].values()])
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()
    snap = status(bad)
    for side in ("A", "B"):
        srv = snap[side]["server"]
        assert srv["state"] == "UNKNOWN", srv                     # never DEAD
        assert "carla" in srv["summary"] + " ".join(srv["evidence"])
    assert snap["B"]["idle"] is False                             # IDLE needs the server ALIVE

    rc = cli(bad, "recover", "A", "--yes", "--json")
    assert rc.returncode == 3 and "UNKNOWN" in json.loads(rc.stdout)["refused"], rc.stdout
    rc = cli(bad, "reclaim", "B", "--yes", "--json")
    assert rc.returncode == 3 and "UNKNOWN" in rc.stdout, rc.stdout
    # `--yes` through the guard itself: the confirmation cannot override UNKNOWN; the refusal is audited.

    async def go():
        async with open_rig(load_config(bad)) as live:
            plan = await recovery_plan(live, "A")
            return plan, await execute_kill(live, plan, Confirmation(True, "--yes", typed="A"), grace_s=1)
    plan, kill = asyncio.run(go())
    assert plan.refused and "UNKNOWN" in plan.refused and not kill.ok and kill.step.status == "refused"
    audit.need(mark, "stop-chain", "refused")
    assert not [ln for ln in audit.since(mark) if ln.get("outcome") != "refused"], audit.since(mark)
    # Nothing vanished: both servers (the same name, as in the incident) and both evaluator chains are up.
    Procs.check(before, planned=[])
    assert status(rig_yaml)["A"]["server"]["state"] == "ALIVE"
    rec.check()


@pytest.fixture
def rig_dead_b(tmp_path):
    d = tmp_path / "sim"
    rig_yaml = sim.up(d, start_evaluators=False)
    try:
        inject(d, "B", "server-crash")
        port = load_config(rig_yaml).sides["B"].server.rpc_port
        assert wait_until(lambda: not marker_procs(port), 5)
        yield d, rig_yaml, port
    finally:
        sim.down(d)


@pytest.mark.scenario("wrong-adapter")
def test_wrong_adapters_no_rise_and_crash_are_stopped_and_skipped(rig_dead_b) -> None:
    d, rig_yaml, port = rig_dead_b
    # 1: starts, renders nothing; 2: crashes; 0: the GPU. Room for the crash on a loaded machine.
    _configure(rig_yaml, "B", [1, 2, 0], start_wait_s=CRASH_ROOM_S)
    a_port = sides(d)["A"]["rpc_port"]
    a_before = {p.key for p in marker_procs(a_port)}
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()
    res = cli(rig_yaml, "adapter", "B", "--yes", "--json", timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    rep = json.loads(res.stdout)
    assert [(t["adapter"], t["verdict"]) for t in rep["tries"]] == [(1, NO_RISE), (2, CRASHED), (0, ACCEPTED)], rep["tries"]
    assert rep["tries"][0]["delta_mb"] == 0 and rep["tries"][2]["delta_mb"] >= 4096
    left = marker_procs(port)                            # only the accepted launch carries B's port token
    assert {p.pid for p in left} == {rep["tries"][2]["pid"], rep["tries"][2]["server_pid"]}
    assert {p.key for p in marker_procs(a_port)} == a_before
    Procs.check(before, planned=[])                      # the stopped try was ours, started after `before`
    stop = audit.need(mark, "stop-own-launch", "done")
    assert stop["targets"][0]["pid"] == rep["tries"][0]["pid"]
    audit.need(mark, "adapter-poll", "done")
    launches = [ln for ln in audit.since(mark) if ln["operation"] == "adapter-launch"]
    assert len(launches) == 3
    assert status(rig_yaml)["B"]["server"]["state"] == "ALIVE"
