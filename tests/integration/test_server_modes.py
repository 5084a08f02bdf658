"""The two server modes (issue 14, facts 3-4), on the sim rig through the console.

- managed (server.managed_by_evaluator: the unpatched Bench2Drive starts its own server): the console
  starts no server, passes --gpu-rank, counts the evaluator's server in the side's chain (exact port token
  and parentage), and a recovery leaves no orphan server and no spurious `Failed` record;
- external (the sim's default, B2D_EXTERNAL_SERVER=1): an evaluator that starts a second server anyway
  (unpatched) is stopped, its server with it, with the reason.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from sim.procs import find_by_token
from tests.support.evalops_sim import checkpoint, cli, harness_state, sim_rig, wait_until


def _side(d: Path) -> dict:
    return json.loads((d / "sim" / "sides.json").read_text())["sides"]["A"]


def test_managed_server_is_the_evaluators_and_recovery_leaves_no_orphan(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), server_mode="evaluator", route_s=60, stall_s=3.0) as rig_yaml:
        port = _side(d)["rpc_port"]
        marker = f"-carla-rpc-port={port}"
        assert not find_by_token(marker)                       # the sim started no server for it
        dry = cli(rig_yaml, "launch", "A", "--dry-run", "--json")
        out = json.loads(dry.stdout)
        assert dry.returncode == 0, out["refused"]
        assert out["argv"][out["argv"].index("--gpu-rank") + 1] == "0"
        assert "B2D_EXTERNAL_SERVER" not in out["env"]
        res = cli(rig_yaml, "launch", "A", "--yes")
        assert res.returncode == 0, res.stdout + res.stderr
        log = d / "work" / "A" / "logs" / "eval.log"
        assert wait_until(lambda: log.exists() and "step 2 " in log.read_text(), 40), log.read_text()[-1500:]
        assert f"at 127.0.0.1:{port}" in log.read_text()       # its own server, on the side's port
        own = find_by_token(marker)
        assert own
        snap = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]
        roles = [m["role"] for m in snap["evaluator"]["chain"]]
        assert roles[:2] == ["harness", "wrapper"] and "evaluator" in roles and "server" in roles
        assert {m["pid"] for m in snap["evaluator"]["chain"] if m["role"] == "server"} <= {p.pid for p in own}

        from sim import rig
        rig.inject(d, "A", "hang")
        assert wait_until(lambda: json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
                          ["sides"]["A"]["heartbeat"]["state"] == "STALE", 30)
        rec = cli(rig_yaml, "recover", "A", "--yes", "--json", timeout=120)
        res = json.loads(rec.stdout)
        killed = {t["pid"] for t in res["kill_plan"]}
        assert {p.pid for p in own} <= killed, res["kill_plan"]  # the evaluator's own server is in the plan
        assert all(not p.is_running() or p.status() == "zombie" for p in own)   # no orphan server
        cp = checkpoint(d, "A")
        assert not cp or all(r["status"] != "Failed" for r in cp["_checkpoint"]["records"])   # no SIGINT record


def test_external_side_stops_an_unpatched_evaluator_that_starts_a_second_server(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), route_s=60) as rig_yaml:
        port = _side(d)["rpc_port"]
        cfg = yaml.safe_load(rig_yaml.read_text())
        env = cfg["sides"]["A"]["evaluator"]["env"]
        del env["B2D_EXTERNAL_SERVER"]                         # the unpatched evaluator
        env.update({"CARLA_ROOT": str(d / "bin"), "SIM_SERVER_WAIT_S": "30", "SIM_CONNECT_RETRY_S": "0.5"})
        rig_yaml.write_text(yaml.safe_dump(cfg, sort_keys=False))
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "refused" and s, 60)
        assert st, harness_state(d, "A")
        assert "started a server of its own" in st["detail"] and f"-carla-rpc-port={port + 3}" in st["detail"]
        assert wait_until(lambda: not find_by_token(f"-carla-rpc-port={port + 3}"), 10)
        assert find_by_token(f"-carla-rpc-port={port}")        # the side's own (external) server is untouched
        assert st["attempt"] == 1
