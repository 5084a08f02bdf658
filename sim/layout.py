"""Where everything of one simulated rig lives under its directory D (one place, so no fake guesses).

    D/rig.yaml                 the config the console loads
    D/state/                   the console's state dir (the sim only creates it)
    D/bin/                     CarlaUE4.sh, CarlaUE4-Linux-Shipping (+ CarlaUE4/), nvidia-smi, netsh, conda
    D/logs/server_<side>.log   server stdout/stderr (shipping CARLA writes next to nothing)
    D/work/<side>/             evaluator cwd: leaderboard_evaluator.py, routes.xml, agent.py, ckpt/,
                               results/result.json, logs/eval.log
    D/sim/gpus.json            fake GPUs and what each -graphicsadapter index does
    D/sim/gpu/<pid>.json       the VRAM ledger: one entry per rendering server process
    D/sim/servers/<port>.mode  'hang' makes the server on that RPC port accept but never answer
    D/sim/servers/<port>.version  the version that server answers instead of 0.9.15
    D/sim/site, D/sim/pf/...   what the preflight failure envs are made of (sim/envs.py)
    D/sim/nvidia-smi.mode      ok | na | fail | hang
    D/sim/netsh.mode           ok | fail | hang
    D/sim/conda.mode           ok | hang
    D/sim/envs.json            the fake conda envs
    D/sim/excluded.json        the fake winNAT exclusion table [[start, end, administered], ...]
    D/sim/faults/<side>        an evaluator's fault file (hang | crash | finish), consumed when acted on
    D/sim/sides.json           per side: ports, paths (what rig.up decided; rig.inject/start_evaluator read it)
    D/sim/pids.json            what rig.up/start_* started: pid + create_time + role
    D/sim/registry.jsonl       every fake long-lived process registers itself here (pid + create_time)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.platform import atomic

SHIPPING_NAME = "CarlaUE4-Linux-Shipping"
LAUNCHER_NAME = "CarlaUE4.sh"
# A recorded process's create time against the one read again: /proc's are stable per process, but float
# formatting through JSON can jitter the last digits.
CREATE_TIME_TOLERANCE_S = 0.05
PROJECT_NAME = "CarlaUE4"   # the shipping binary's first argument, and the dir that holds the fake's code


@dataclass(frozen=True)
class SimLayout:
    root: Path

    @classmethod
    def of(cls, root: str | os.PathLike[str]) -> SimLayout:
        return cls(Path(root).expanduser().resolve())

    # directories
    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def sim(self) -> Path:
        return self.root / "sim"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def gpu_ledger(self) -> Path:
        return self.sim / "gpu"

    @property
    def server_modes(self) -> Path:
        return self.sim / "servers"

    @property
    def faults(self) -> Path:
        return self.sim / "faults"

    def work(self, side: str) -> Path:
        return self.root / "work" / side

    # files
    @property
    def rig_yaml(self) -> Path:
        return self.root / "rig.yaml"

    @property
    def launcher(self) -> Path:
        return self.bin / LAUNCHER_NAME

    @property
    def shipping(self) -> Path:
        return self.bin / SHIPPING_NAME

    @property
    def nvidia_smi(self) -> Path:
        return self.bin / "nvidia-smi"

    @property
    def netsh(self) -> Path:
        return self.bin / "netsh"

    @property
    def conda(self) -> Path:
        return self.bin / "conda"

    @property
    def gpus_json(self) -> Path:
        return self.sim / "gpus.json"

    @property
    def envs_json(self) -> Path:
        return self.sim / "envs.json"

    @property
    def excluded_json(self) -> Path:
        return self.sim / "excluded.json"

    @property
    def sides_json(self) -> Path:
        return self.sim / "sides.json"

    @property
    def pids_json(self) -> Path:
        return self.sim / "pids.json"

    @property
    def registry(self) -> Path:
        return self.sim / "registry.jsonl"

    @property
    def nvsmi_mode(self) -> Path:
        return self.sim / "nvidia-smi.mode"

    @property
    def netsh_mode(self) -> Path:
        return self.sim / "netsh.mode"

    @property
    def conda_mode(self) -> Path:
        return self.sim / "conda.mode"

    def server_mode(self, rpc_port: int) -> Path:
        return self.server_modes / f"{rpc_port}.mode"

    def server_version(self, rpc_port: int) -> Path:
        return self.server_modes / f"{rpc_port}.version"

    def fault_file(self, side: str) -> Path:
        return self.faults / side

    def server_log(self, side: str) -> Path:
        return self.logs / f"server_{side}.log"


def read_json(path: Path, default: Any) -> Any:
    """The file's JSON, or default when it does not exist (a corrupt file raises: it is a sim bug)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return default
    return json.loads(text)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write via a temp file + rename, so that a concurrent reader never sees half a file.

    (The fake *evaluator* deliberately does not do this for its checkpoint: the real one does not.)
    """
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    atomic.write_bytes(path, text.encode())


def read_mode(path: Path, allowed: tuple[str, ...], default: str = "ok") -> str:
    """A mode file's word; a missing or empty file is `default`; an unknown word raises ValueError."""
    try:
        word = path.read_text().strip()
    except FileNotFoundError:
        return default
    word = word or default
    if word not in allowed:
        raise ValueError(f"{path}: unknown mode {word!r} (allowed: {', '.join(allowed)})")
    return word
