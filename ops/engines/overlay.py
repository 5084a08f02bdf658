"""Where a scheduled side really runs: the job's own record (STATE/sides/SIDE/job.json, written on its node
by ops/engines/slurm_job.py) overlaid on the config, so that the probes look at the ports and adapter the
job took there. Small on purpose: ops/rig.py applies it on every beat."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ops.model import RigConfig

LIVE = ("running", "starting-server")


def job_record_path(rig: RigConfig, side: str) -> Path:
    return Path(rig.state_dir) / "sides" / side / "job.json"


def read_job_record(rig: RigConfig, side: str) -> dict | None:
    try:
        data = json.loads(job_record_path(rig, side).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def records_key(rig: RigConfig) -> tuple:
    """What the job records look like from outside (each one's mtime and size, None if absent): while it
    stays the same, so does effective_rig, and a beat of tens of sides need not read and parse them all."""
    key: list[tuple[int, int] | None] = []
    for name in rig.sides:
        try:
            st = job_record_path(rig, name).stat()
            key.append((st.st_mtime_ns, st.st_size))
        except OSError:
            key.append(None)
    return tuple(key)


def effective_rig(rig: RigConfig) -> RigConfig:
    """Each scheduled side's ports and adapter as its job took them on its node. A side whose job has not
    written its record (queued, or never started) keeps the config's values."""
    if rig.engine == "process":
        return rig
    sides = dict(rig.sides)
    changed = False
    for name, sc in rig.sides.items():
        rec = read_job_record(rig, name)
        if not rec or rec.get("status") not in LIVE:
            continue
        try:
            rpc, tm = int(rec["rpc_port"]), int(rec["tm_port"])
            adapter = int(rec["adapter"]) if rec.get("adapter") is not None else sc.server.adapter
        except (KeyError, TypeError, ValueError):
            continue
        if (rpc, tm, adapter) == (sc.server.rpc_port, sc.evaluator.tm_port, sc.server.adapter):
            continue
        sides[name] = dataclasses.replace(
            sc, server=dataclasses.replace(sc.server, rpc_port=rpc, adapter=adapter),
            evaluator=dataclasses.replace(sc.evaluator, tm_port=tm))
        changed = True
    return dataclasses.replace(rig, sides=sides) if changed else rig
