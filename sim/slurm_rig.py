"""The sim rig with SLURM as its engine (`sim up --engine slurm`): the same files, tools and work dirs as
`sim up`, but no server is started here — each side's job starts its own server on its node (ops/engines/
slurm_job.py) — and rig.yaml says `engine: slurm` with a `slurm:` block for the cluster SLURM_CONF names.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sim import install
from sim import ports as ports_mod
from sim import rig as sim
from sim.layout import write_text_atomic
from sim.ledger import RENDER


def side_names(n: int) -> list[str]:
    """A..Z up to 26 sides, then s01, s02 ... (sortable, and short enough for a table's first column)."""
    if n <= 26:
        return [chr(ord("A") + i) for i in range(n)]
    return [f"s{i + 1:02d}" for i in range(n)]


NODE_GPUS = 64   # adapters 0..63 render: a fake node as big as any test cluster's GRES


def node_gpus(n: int = NODE_GPUS) -> dict[str, Any]:
    """The sim's GPU model of a cluster node: n GPUs, adapter k renders on GPU k (a headless node has no
    Basic Render Driver in the list). The SLURM allocation's index is then the right -graphicsadapter."""
    return {"gpus": [{"index": k, "name": "NVIDIA H200", "total_mb": 143771, "base_used_mb": 0,
                      "uuid": f"GPU-00000000-0000-4000-8000-{k:012d}"} for k in range(n)],
            "adapters": {str(k): {"behaviour": RENDER, "gpu": k, "mb": 6000, "delay_s": 0.5} for k in range(n)}}


def up(dir: str | Path, *, sides: Sequence[str], conf: str | None = None, throttle: int = 0,
       route_s: float = sim.ROUTE_S, routes: int = 10, stall_s: float = 6.0, tick_s: float = 0.5,
       requeue_budget: int = 3, gres: str | None = "gpu:1") -> Path:
    """Write the rig (no process started); return rig.yaml. conf: the cluster's slurm.conf (default:
    $SLURM_CONF), written into rig.yaml so that a later console reaches the same cluster."""
    conf = conf or os.environ.get("SLURM_CONF")
    if not conf:
        raise ValueError("sim up --engine slurm runs the sides on the cluster SLURM_CONF names: set SLURM_CONF "
                         "(or pass the cluster's slurm.conf)")
    layout, _excluded = sim._fresh(dir, sides, node_gpus(), None)
    # The config's ports are only each job's first choice (it takes free ones on its node): a plain
    # disjoint plan, 10 ports a side, from a free block here (tens of sides do not fit the sim's spread-out
    # random picks).
    base = ports_mod.pick(1)[0].rpc
    base = base - base % 10
    if base + 10 * len(sides) > 65000:
        base = 20000
    states = []
    for i, name in enumerate(sides):
        work = install.write_work_dir(layout, name, routes)
        states.append(sim.SideState(name=name, rpc_port=base + 10 * i, tm_port=base + 10 * i + 5, adapter=0,
                                    work=str(work), route_s=route_s, tick_s=tick_s, eval_timeout_s=600.0))
    sim._write_config(layout, states, stall_s)
    cfg = yaml.safe_load(layout.rig_yaml.read_text())
    # Tens of sides start at once on one node: their probes (the sim's netsh, the carla client under the
    # fake conda) take seconds while the node is busy starting them. Timeouts stay timeouts (UNKNOWN
    # refuses), just not the 3 s of a two-side demo.
    for side in cfg["sides"].values():
        side["server"]["probe_timeout_s"] = max(side["server"].get("probe_timeout_s", 3), 15)
    cfg["name"] = re.sub(r"[^A-Za-z0-9_-]", "-", str(cfg["name"]))
    cfg["engine"] = "slurm"
    cfg["slurm"] = {"host": "local", "cluster": "sim", "conf": str(Path(conf).resolve()),
                    "gres": gres, "requeue_budget": requeue_budget, "array_throttle": throttle}
    write_text_atomic(layout.rig_yaml, yaml.safe_dump(cfg, sort_keys=False))
    return layout.rig_yaml
