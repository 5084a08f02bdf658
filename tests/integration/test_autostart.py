"""server.auto_start: a DEAD server is brought up by adapter polling (through the guard) before the
evaluator starts — by `launch`, and by the harness when the server died under a run."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from sim import rig as sim
from tests.support.evalops_sim import cli, harness_state, sim_rig, wait_until


def _auto_start(rig_yaml: Path, side: str = "A") -> None:
    data = yaml.safe_load(rig_yaml.read_text())
    data["sides"][side]["server"].update(auto_start=True, adapter_candidates=[0])
    rig_yaml.write_text(yaml.safe_dump(data))


def _audit(d: Path) -> list[dict]:
    path = d / "state" / "audit.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_launch_and_harness_start_a_dead_server(tmp_path: Path) -> None:
    d = tmp_path / "rig"
    # A short client timeout: when its server dies the evaluator fails in seconds, not in 600 s.
    with sim_rig(d, eval_timeout_s=2.0) as rig_yaml:
        _auto_start(rig_yaml)
        sim.inject(d, "A", "server-crash")
        out = cli(rig_yaml, "launch", "A", "--yes", "--json", timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "server started on adapter 0" in out.stderr
        ops = [a["operation"] for a in _audit(d)]
        assert ops.index("adapter-poll") < ops.index("relaunch")
        assert wait_until(lambda: (harness_state(d, "A") or {}).get("status") == "running", 30)

        # The server dies under the run, the evaluator's client times out and it exits non-zero: the harness
        # polls the adapters again, then resumes.
        polls = ops.count("adapter-poll")
        sim.inject(d, "A", "server-crash")
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] >= 2 and s["status"] == "running"
                        and s, 90)
        assert st, harness_state(d, "A")
        assert [a["operation"] for a in _audit(d)].count("adapter-poll") > polls
        status = json.loads(cli(rig_yaml, "status", "--json").stdout)["sides"]["A"]
        assert status["server"]["state"] == "ALIVE" and status["evaluator"]["attempt"] >= 2


def test_without_auto_start_a_dead_server_refuses(tmp_path: Path) -> None:
    d = tmp_path / "rig"
    with sim_rig(d) as rig_yaml:
        sim.inject(d, "B", "server-crash")
        out = cli(rig_yaml, "launch", "B", "--yes")
        assert out.returncode == 3 and "server" in out.stdout
        assert "adapter-poll" not in [a["operation"] for a in _audit(d)]
