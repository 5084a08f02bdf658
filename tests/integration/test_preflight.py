"""Preflight on the sim rig (issue 21): every check's verdict with evidence, each failure refused with its
exact reason, and launches refused for `--debug 1` and for a VRAM budget that does not fit.

The failures are the sim's (sim/envs.py): envs whose PYTHONPATH breaks the side the way the field notes
saw it, a server that answers another version, a fake torch whose CUDA devices are the sim's GPUs, and a
foreign process holding most of the GPU.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sim import envs as sim_envs
from tests.support.evalops_sim import cli, sides, sim_rig, wait_until

CHECKS = ["debug", "carla-import", "carla-dists", "carla-version", "evaluator-modules", "agent-import",
          "torch-cuda", "model-gpu"]


def edit_rig(rig_yaml: Path, side: str, **changes) -> None:
    """Change a side's config: `block__key=value` sets a key of that block (evaluator__conda_env=...)."""
    cfg = yaml.safe_load(rig_yaml.read_text())
    sc = cfg["sides"][side]
    for key, value in changes.items():
        block, _, leaf = key.rpartition("__")
        target = sc[block] if block else sc
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    rig_yaml.write_text(yaml.safe_dump(cfg, sort_keys=False))


def preflight(rig_yaml: Path, side: str) -> tuple[int, dict]:
    out = cli(rig_yaml, "preflight", side, "--json", timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)["sides"][side]


def wait_rendering(rig_yaml: Path, *names: str) -> None:
    """The sim's server books its VRAM a moment after it starts (its adapter's delay_s, as a real server
    allocates with its first frames). A GPU check made before then finds the server's pids on no GPU and
    answers UNKNOWN (fail-closed), so the tests that need the server's GPU wait until each holds its VRAM."""
    def booked() -> bool:
        try:   # status's exit code says what it found; its JSON is what is read
            sides_ = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]
        except (ValueError, KeyError):
            return False
        return all(((sides_.get(n) or {}).get("vram") or {}).get("server_mb") for n in names)
    assert wait_until(booked, 60), "the sim's servers never booked their VRAM"


def by_name(rep: dict) -> dict[str, dict]:
    return {c["name"]: c for c in rep["checks"]}


@pytest.mark.timeout(900)   # one rig, eight preflights of several seconds each on a loaded machine
def test_preflight_json_of_a_healthy_side_and_each_failure(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        t0 = time.perf_counter()
        rc, rep = preflight(rig_yaml, "A")
        wall = time.perf_counter() - t0
        checks = by_name(rep)
        assert rc == 0 and rep["refused"] is None, rep
        assert list(checks) == CHECKS
        for c in rep["checks"]:
            assert c["verdict"] in ("PASS", "WARN", "SKIP") and c["summary"] and c["evidence"], c
        # The sim's server answers 0.9.15, the env's client is the 0.9.16 wheel: same minor, a warning.
        assert checks["carla-version"]["verdict"] == "WARN"
        assert "client 0.9.16 against server 0.9.15" in checks["carla-version"]["summary"]
        work = sides(d)["A"]["work"]
        assert any(f"leaderboard from {work}/leaderboard/leaderboard/__init__.py" in e
                   for e in checks["evaluator-modules"]["evidence"])
        assert checks["agent-import"]["summary"] == f"agent imports from {work}/agent.py (not constructed)"
        assert checks["torch-cuda"]["verdict"] == "SKIP"
        print(f"\nhealthy preflight: {rep['took_ms'] / 1e3:.2f} s inside, {wall:.2f} s for the whole command")

        # ---- an env where setuptools >= 81 took pkg_resources away: the agent import names it -------
        edit_rig(rig_yaml, "A", evaluator__conda_env=sim_envs.ENV_SETUPTOOLS81)
        rc, rep = preflight(rig_yaml, "A")
        agent = by_name(rep)["agent-import"]
        assert rc == 1 and agent["verdict"] == "FAIL"
        assert "ModuleNotFoundError: No module named 'pkg_resources'" in agent["summary"]
        assert "missing module: pkg_resources" in agent["evidence"]
        assert any("wandb/__init__.py" in e for e in agent["evidence"]), agent["evidence"]

        # ---- a second leaderboard tree ahead on PYTHONPATH: the first one wins, refused -------------
        edit_rig(rig_yaml, "A", evaluator__conda_env=sim_envs.ENV_TWOTREES)
        rc, rep = preflight(rig_yaml, "A")
        mods = by_name(rep)["evaluator-modules"]
        other = str(d.resolve() / "sim" / "pf" / "othertree")
        assert rc == 1 and mods["verdict"] == "FAIL", mods
        assert "outside the side's cwd" in mods["summary"] and f"leaderboard from {other}" in mods["summary"]
        assert f"srunner from {other}" in mods["summary"]

        # ---- carla and carla-ue5-api in one env --------------------------------------------------------
        edit_rig(rig_yaml, "A", evaluator__conda_env=sim_envs.ENV_UE5BOTH)
        rc, rep = preflight(rig_yaml, "A")
        dists = by_name(rep)["carla-dists"]
        assert rc == 1 and dists["verdict"] == "FAIL"
        assert "carla and carla-ue5-api are both installed" in dists["summary"]
        assert any(e.startswith("carla-ue5-api 0.10.0 at ") for e in dists["evidence"])

        # ---- no carla at all ------------------------------------------------------------------------
        edit_rig(rig_yaml, "A", evaluator__conda_env="sim-nocarla")
        rc, rep = preflight(rig_yaml, "A")
        assert rc == 1 and by_name(rep)["carla-import"]["verdict"] == "FAIL"
        assert "ModuleNotFoundError: No module named 'carla'" in by_name(rep)["carla-import"]["summary"]
        assert by_name(rep)["carla-version"]["verdict"] == "UNKNOWN"

        # ---- a server of another minor version (a UE5 0.10 server) ----------------------------------
        edit_rig(rig_yaml, "A", evaluator__conda_env="sim-carla")
        sim_envs.set_server_version(d, sides(d)["A"]["rpc_port"], "0.10.0")
        rc, rep = preflight(rig_yaml, "A")
        ver = by_name(rep)["carla-version"]
        assert rc == 1 and ver["verdict"] == "FAIL"
        assert ver["summary"] == ("client 0.9.16 against server 0.10.0: major.minor differ (the RPC protocol is "
                                  "not compatible)")
        # And the launch is refused with that evidence, exit 3.
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(out.stdout)
        assert out.returncode == 3 and "major.minor differ" in plan["refused"]
        assert plan["preflight"]["checks"][3]["verdict"] == "FAIL"


TWO_GPUS = {
    "gpus": [{"index": 0, "name": "NVIDIA H200", "total_mb": 143771, "uuid": "GPU-5a1f0c3e-8d2b-4c7a-9e61-0b3d2f4a7c19"},
             {"index": 1, "name": "NVIDIA H200", "total_mb": 143771, "uuid": "GPU-77e0c1aa-0b4e-4f3c-8a1d-2c9b5e6f7a80"}],
    "adapters": {"0": {"behaviour": "render", "gpu": 0, "mb": 6000, "delay_s": 0.5}, "1": {"behaviour": "idle"},
                 "2": {"behaviour": "crash", "delay_s": 1.0}, "3": {"behaviour": "idle"}},
}


@pytest.mark.timeout(600)
def test_torch_sees_cuda_and_keeps_off_the_servers_gpu(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), gpus=TWO_GPUS) as rig_yaml:
        wait_rendering(rig_yaml, "A")
        env = yaml.safe_load(rig_yaml.read_text())["sides"]["A"]["evaluator"]["env"]
        edit_rig(rig_yaml, "A", evaluator__conda_env=sim_envs.ENV_TORCH,
                 evaluator__env={**env, "CUDA_VISIBLE_DEVICES": "1"})
        rc, rep = preflight(rig_yaml, "A")
        c = by_name(rep)
        assert rc == 0, rep["refused"]
        assert c["torch-cuda"]["verdict"] == "PASS" and c["torch-cuda"]["summary"] == "cuda:0 is NVIDIA H200"
        assert c["model-gpu"]["verdict"] == "PASS" and "GPU-77e0c1aa" in c["model-gpu"]["summary"]

        # The model on the GPU the server renders on (gpu0, found by the server's pid): refused...
        edit_rig(rig_yaml, "A", evaluator__env={**env, "CUDA_VISIBLE_DEVICES": "0"})
        rc, rep = preflight(rig_yaml, "A")
        c = by_name(rep)["model-gpu"]
        assert rc == 1 and c["verdict"] == "FAIL" and "the GPU the server renders on (gpu0" in c["summary"]
        # ... unless the config says so.
        edit_rig(rig_yaml, "A", evaluator__share_server_gpu=True)
        rc, rep = preflight(rig_yaml, "A")
        assert rc == 0 and by_name(rep)["model-gpu"]["verdict"] == "WARN"

        # No CUDA device visible in the env.
        edit_rig(rig_yaml, "A", evaluator__env={**env, "CUDA_VISIBLE_DEVICES": ""})
        rc, rep = preflight(rig_yaml, "A")
        c = by_name(rep)["torch-cuda"]
        assert rc == 1 and c["verdict"] == "FAIL" and "sees no CUDA device (CUDA_VISIBLE_DEVICES=)" in c["summary"]


@pytest.mark.timeout(600)
def test_launch_refused_for_debug_1_unless_a_debugging_run(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        args = yaml.safe_load(rig_yaml.read_text())["sides"]["A"]["evaluator"]["args"]
        edit_rig(rig_yaml, "A", evaluator__args={**args, "debug": 1})
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(out.stdout)
        assert out.returncode == 3
        assert "--debug 1 in the evaluator args draws the route into the camera images" in plan["refused"]
        assert "--debug" in plan["argv"] and plan["preflight"]["checks"][0]["verdict"] == "FAIL"
        # A real launch refuses the same way and starts nothing.
        out = cli(rig_yaml, "launch", "A", "--yes", timeout=120)
        assert out.returncode == 3 and not (d / "state" / "sides" / "A" / "harness.json").exists()

        edit_rig(rig_yaml, "A", evaluator__debug_run=True)
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(out.stdout)
        assert out.returncode == 0, plan["refused"]
        assert plan["preflight"]["debug_run"] is True
        assert any("DEBUGGING RUN" in c["detail"] for c in plan["checks"] if c["name"] == "preflight")
        status = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
        assert status["sides"]["A"]["debug_run"] is True
        assert "DEBUGGING run" in cli(rig_yaml, "check-config").stdout


@pytest.fixture
def stranger():
    """Another user's process on the GPU (its ledger entry lives as long as it does)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


@pytest.mark.timeout(600)
def test_launch_refused_for_a_vram_budget_that_does_not_fit_and_foreign_load_shown(tmp_path: Path,
                                                                                   stranger) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A", "B")) as rig_yaml:
        wait_rendering(rig_yaml, "A", "B")
        # Side B reserves what its budget still lacks: A must fit beside that, not beside B's 6000 MiB now.
        edit_rig(rig_yaml, "B", vram_budget_mb=100000)
        edit_rig(rig_yaml, "A", vram_budget_mb=20000)
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(out.stdout)
        assert out.returncode == 0, plan["refused"]
        budget = next(c for c in plan["checks"] if c["name"] == "vram-budget")
        assert budget["status"] == "ok"
        assert ("side A needs 14000 MiB more (vram_budget_mb 20000, holds 6000) on gpu0 NVIDIA H200: 131771 MiB "
                "free of 143771, B still reserves 94000 MiB → 37771 MiB available") == budget["detail"]

        # A GPU near full: someone else's job holds 30000 MiB.
        sim_envs.foreign_gpu_load(d, stranger.pid, 30000)
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(out.stdout)
        assert out.returncode == 3
        assert ("VRAM budget does not fit: side A needs 14000 MiB more (vram_budget_mb 20000, holds 6000) on gpu0 "
                "NVIDIA H200: 101771 MiB free of 143771, B still reserves 94000 MiB → 7771 MiB available"
                ) in plan["refused"]
        res = plan["resources"]
        assert res["foreign"]["local"] == [{"host": "local", "gpu": 0, "pid": stranger.pid, "used_mb": 30000,
                                            "name": sys.executable}]
        status = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
        warnings = status["resources"]["warnings"]
        assert f"foreign GPU load on local gpu0: pid {stranger.pid} ({sys.executable}) holds 30000 MiB and belongs " \
               "to no side" in warnings
        assert any(w.startswith("VRAM budget of side A does not fit") for w in warnings)
