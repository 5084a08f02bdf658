"""The sim's evaluator trees and the conda envs that break them, one per preflight failure (issue 21).

Every side's work dir holds a Bench2Drive-shaped pair of trees, `leaderboard/leaderboard` and
`scenario_runner/srunner`, put on PYTHONPATH by the side's env like run_evaluation.sh does, and an agent
that imports what real agents import (a logger that needs `pkg_resources`, leaderboard's autoagents).
The envs (all the same interpreter, told apart by what their PYTHONPATH puts first, as an env's
activation scripts would):

    sim-carla            healthy: D/sim/site (the env's "site-packages": the fake wandb)
    sim-setuptools81     `pkg_resources` gone (setuptools >= 81): the agent import fails naming it
    sim-twotrees         a second leaderboard/srunner tree (D/sim/pf/othertree) ahead of the side's own
    sim-ue5both          carla-ue5-api's metadata installed beside carla
    sim-torch            a fake torch (D/sim/pf/torch) whose CUDA devices are D/sim/gpus.json's GPUs,
                         filtered by CUDA_VISIBLE_DEVICES like the real runtime

A server that answers another version: D/sim/servers/<N>.version (set_server_version below); a GPU
near full or another user's job on it: foreign_gpu_load below.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from sim.layout import SimLayout, write_text_atomic

ENV_SETUPTOOLS81 = "sim-setuptools81"
ENV_TWOTREES = "sim-twotrees"
ENV_UE5BOTH = "sim-ue5both"
ENV_TORCH = "sim-torch"

_AUTONOMOUS_AGENT = '''"""leaderboard.autoagents.autonomous_agent, simulated: imports what the real one imports."""
import carla  # noqa: F401
from srunner.scenariomanager import timer  # noqa: F401


class AutonomousAgent:
    def __init__(self, carla_host, carla_port, debug=False):
        raise RuntimeError("the sim's agent is never constructed")
'''

_WANDB = '''"""wandb 0.16.3, simulated at the one point that matters: it imports pkg_resources at import time."""
import pkg_resources  # noqa: F401
'''

_NO_PKG_RESOURCES = '''# setuptools >= 81 removed pkg_resources: this shadow makes the import fail exactly like that.
raise ModuleNotFoundError("No module named 'pkg_resources'", name="pkg_resources")
'''

_PKG_RESOURCES_STANDIN = '''"""A stand-in for setuptools' pkg_resources, for interpreters that ship without it (the healthy env has it)."""
'''

_UE5_METADATA = "Metadata-Version: 2.1\nName: carla-ue5-api\nVersion: 0.10.0\nSummary: Python API for CARLA (UE5)\n"

_TORCH = '''"""torch, simulated: CUDA devices are the sim's GPUs (D/sim/gpus.json) as CUDA_VISIBLE_DEVICES filters them."""
import json
import os
import uuid as _uuid

__version__ = "2.1.0+sim"


class version:
    cuda = "12.1"


def _devices():
    with open({gpus!r}) as f:
        gpus = json.load(f)["gpus"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    out = []
    for tok in visible.split(","):
        tok = tok.strip()
        if not tok.isdigit():
            break  # the runtime stops at the first invalid entry
        out += [g for g in gpus if int(g["index"]) == int(tok)]
    return out


class _Props:
    def __init__(self, g):
        self.name = g["name"]
        self.total_memory = int(g["total_mb"]) * 2**20
        self.uuid = _uuid.UUID(g["uuid"][4:]) if g.get("uuid", "").startswith("GPU-") else None


class cuda:
    @staticmethod
    def is_available():
        return bool(_devices())

    @staticmethod
    def device_count():
        return len(_devices())

    @staticmethod
    def get_device_name(i=0):
        return _devices()[i]["name"]

    @staticmethod
    def get_device_properties(i):
        return _Props(_devices()[i])
'''


def tree_paths(work: Path) -> list[str]:
    """What the side's PYTHONPATH holds: its two trees, like Bench2Drive's run_evaluation.sh exports them."""
    return [str(work / "leaderboard"), str(work / "scenario_runner")]


def write_tree(root: Path) -> None:
    """A Bench2Drive-shaped pair of trees under root (a side's work dir, or the sim's second tree)."""
    lb = root / "leaderboard" / "leaderboard"
    sr = root / "scenario_runner" / "srunner"
    for f, text in {
        lb / "__init__.py": "",
        lb / "autoagents" / "__init__.py": "",
        lb / "autoagents" / "autonomous_agent.py": _AUTONOMOUS_AGENT,
        sr / "__init__.py": "",
        sr / "scenariomanager" / "__init__.py": "",
        sr / "scenariomanager" / "timer.py": '"""srunner.scenariomanager.timer, simulated."""\n',
    }.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(f, text)


def _pf(layout: SimLayout) -> Path:
    return layout.sim / "pf"


def healthy_path(layout: SimLayout) -> list[str]:
    return [str(layout.sim / "site")]


def write_env_files(layout: SimLayout, root_prefix: Path) -> dict[str, dict[str, Any]]:
    """Write the envs' files; return their envs.json entries (the healthy one's path: healthy_path)."""
    site = layout.sim / "site"
    pf = _pf(layout)
    files = {site / "wandb" / "__init__.py": _WANDB,
             pf / "nopkgres" / "pkg_resources.py": _NO_PKG_RESOURCES,
             pf / "ue5" / "carla_ue5_api-0.10.0.dist-info" / "METADATA": _UE5_METADATA,
             pf / "torch" / "torch" / "__init__.py": _TORCH.format(gpus=str(layout.gpus_json))}
    if importlib.util.find_spec("pkg_resources") is None:
        files[site / "pkg_resources.py"] = _PKG_RESOURCES_STANDIN
    for f, text in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(f, text)
    write_tree(pf / "othertree")
    healthy = healthy_path(layout)

    def env(name: str, first: list[str]) -> dict[str, Any]:
        return {"prefix": str(root_prefix / "envs" / name), "python": sys.executable, "pythonpath": [*first, *healthy]}
    return {
        ENV_SETUPTOOLS81: env(ENV_SETUPTOOLS81, [str(pf / "nopkgres")]),
        ENV_TWOTREES: env(ENV_TWOTREES, tree_paths(pf / "othertree")),
        ENV_UE5BOTH: env(ENV_UE5BOTH, [str(pf / "ue5")]),
        ENV_TORCH: env(ENV_TORCH, [str(pf / "torch")]),
    }


def set_server_version(dir: str | Path, rpc_port: int, version: str | None) -> Path:
    """Make the server on rpc_port answer `version` (None: back to 0.9.15)."""
    path = SimLayout.of(dir).server_version(rpc_port)
    if version is None:
        path.unlink(missing_ok=True)
    else:
        write_text_atomic(path, version + "\n")
    return path


def foreign_gpu_load(dir: str | Path, pid: int, mb: int, gpu: int = 0) -> Path:
    """Someone else's job on a sim GPU: a ledger entry for a live process that belongs to no side (the
    fake nvidia-smi lists it while that process lives). A large mb is a GPU ledger near full."""
    import psutil

    from sim.ledger import write_entry
    return write_entry(SimLayout.of(dir), pid, psutil.Process(pid).create_time(), gpu, mb, foreign=True)
