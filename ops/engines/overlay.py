"""Where a scheduled side really runs: the job's own record (STATE/sides/SIDE/job.json, written on its node
by ops/engines/slurm_job.py) overlaid on the config, so that the probes look at the ports and adapter the
job took there. Small on purpose: ops/rig.py applies it on every beat."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

from ops.model import RigConfig

LIVE = ("running", "starting-server")


def job_record_path(rig: RigConfig, side: str) -> Path:
    return Path(_record_file(rig.state_dir, side))


@functools.lru_cache(maxsize=4096)
def _record_file(state_dir: str, side: str) -> str:
    # Every side's record is looked at on every beat: the path is joined once (pathlib was a tenth of a
    # 32-side SLURM beat).
    return os.path.join(state_dir, "sides", side, "job.json")


# path -> (its stat key, the record parsed then): a record is rewritten as a whole (a new file moved over
# the old one), so an unchanged stat is an unchanged record, and a beat need not read and parse 32 of them.
_parsed: dict[str, tuple[tuple[int, int, int], dict | None]] = {}


def read_job_record(rig: RigConfig, side: str) -> dict | None:
    path = _record_file(rig.state_dir, side)
    try:
        st = os.stat(path)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _parsed.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    record = data if isinstance(data, dict) else None
    _parsed[path] = (key, record)
    return record


def records_key(rig: RigConfig) -> tuple:
    """What the job records look like from outside (each one's mtime and size, None if absent): while it
    stays the same, so does effective_rig, and a beat of tens of sides need not read and parse them all."""
    key: list[tuple[int, int] | None] = []
    for name in rig.sides:
        try:
            st = os.stat(_record_file(rig.state_dir, name))
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
