"""Guided recovery on the sim rig: `inject hang` → `recover --yes`.

The plan must hold exactly side A's harness, wrapper and evaluator, outer → inner; not a decoy whose port
token is a longer number starting with A's port (and that even carries A's TM port), not the shell that
runs the command (its argv holds A's exact tokens), not side B's processes. Afterwards A resumes from its
checkpoint, its heartbeat is FRESH again, and no completed record is lost.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.evalops_sim import (
    REPO,
    alive,
    checkpoint,
    cli,
    done_records,
    harness_state,
    sides,
    sim_rig,
    stop_exact,
    wait_until,
)


def _chain_pids(d: Path, side: str) -> dict[str, int]:
    st = harness_state(d, side)
    return {"harness": st["pid"], "wrapper": st["attempts"][-1]["evaluator_pid"]} if st else {}


def test_recover_a_hung_side(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, routes=20) as rig_yaml:
        ports = sides(d)
        n, tm = ports["A"]["rpc_port"], ports["A"]["tm_port"]
        decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                  "--port", f"{n}1", "--traffic-manager-port", str(tm)])
        try:
            for side in ("A", "B"):
                res = cli(rig_yaml, "launch", side, "--yes")
                assert res.returncode == 0, res.stdout + res.stderr
            # Let A record a route, then hang it (alive, silent, 0 % CPU) and let the log go stale.
            assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= 1, 15)
            before = [r["route_id"] for r in done_records(checkpoint(d, "A"))]
            subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), "A", "hang"],
                           cwd=REPO, check=True, capture_output=True)
            time.sleep(0.5)
            hung = done_records(checkpoint(d, "A"))
            assert wait_until(lambda: json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
                              ["sides"]["A"]["heartbeat"]["state"] == "STALE", 15)

            dry = cli(rig_yaml, "recover", "A", "--dry-run", "--json")
            assert dry.returncode == 0, dry.stdout + dry.stderr
            plan = json.loads(dry.stdout)
            assert plan["refused"] is None
            assert plan["verdict"] == {"heartbeat": "STALE", "server": "ALIVE", "evaluator": "ALIVE"}
            assert [k["role"] for k in plan["kill_plan"]] == ["harness", "wrapper", "shell", "evaluator"]
            st_a, st_b = harness_state(d, "A"), harness_state(d, "B")
            inner = st_a["attempts"][-1]["evaluator_pid"]
            pids = [k["pid"] for k in plan["kill_plan"]]
            assert pids[0] == st_a["pid"] and pids[3] == inner
            assert decoy.pid not in pids and st_b["pid"] not in pids
            assert [s["name"] for s in plan["steps"]] == ["verdict", "kill-plan", "confirm", "kill", "server",
                                                         "relaunch", "wait-fresh"]
            assert "cpu 0.0%" in plan["steps"][0]["detail"]

            # The command runs under a shell whose own argv holds A's exact tokens: it must stay out.
            shell = subprocess.run(
                ["bash", "-c", '"$0" -m console -c "$1" recover A --yes --json; exit $?', sys.executable,
                 str(rig_yaml), "--port", str(n), "--traffic-manager-port", str(tm)],
                cwd=REPO, capture_output=True, text=True, timeout=120)
            assert shell.returncode == 0, shell.stdout + shell.stderr
            run = json.loads(shell.stdout)
            assert [k["pid"] for k in run["kill_plan"]] == pids
            status = {s["name"]: s["status"] for s in run["steps"]}
            assert status == {"verdict": "ok", "kill-plan": "ok", "confirm": "done", "kill": "done",
                              "server": "keep", "relaunch": "done", "wait-fresh": "done"}, run["steps"]
            for pid, k in zip(pids, plan["kill_plan"]):
                assert not alive(pid, k["create_time"]), f"{k['role']} {pid} survived"
            assert alive(decoy.pid), "the decoy was killed"
            assert alive(st_b["pid"], st_b["create_time"]) or harness_state(d, "B")["status"] == "finished"

            # A resumed: a new harness, --resume True, the records of before the hang kept, and progress.
            new = harness_state(d, "A")
            assert new["pid"] != st_a["pid"] and new["attempts"][0]["resume"] is True
            assert run["launch"]["backup"]
            assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) > len(hung), 20)
            after = [r["route_id"] for r in done_records(checkpoint(d, "A"))]
            assert after[:len(before)] == before
            snap = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]
            assert snap["heartbeat"]["state"] == "FRESH" and snap["evaluator"]["state"] == "ALIVE"

            # Now FRESH: a second recovery is refused, dry-run or not, with exit 3.
            again = cli(rig_yaml, "recover", "A", "--dry-run", "--json")
            assert again.returncode == 3 and "FRESH" in json.loads(again.stdout)["refused"]
            assert cli(rig_yaml, "recover", "A", "--yes").returncode == 3
        finally:
            decoy.kill()
            decoy.wait()


def test_recover_refuses_a_healthy_side_and_unknown_side(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        res = cli(rig_yaml, "recover", "A", "--dry-run", "--json")
        out = json.loads(res.stdout)
        assert res.returncode == 3 and out["refused"] and out["kill_plan"] == []
        assert cli(rig_yaml, "recover", "Z", "--dry-run").returncode == 2
        # A launch while the side already runs is refused: a second evaluator would fight for the server.
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running" and s, 10)
        second = cli(rig_yaml, "launch", "A", "--dry-run", "--json")
        assert second.returncode == 3 and "already running" in json.loads(second.stdout)["refused"]
        stop_exact([(st["pid"], st["create_time"])])
