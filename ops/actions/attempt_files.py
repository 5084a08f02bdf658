"""The files of one attempt, kept by the harness while the evaluator runs (ops/actions/runplan.py).

- A subset run writes its own checkpoint; every time it changes (and once more when the attempt ends),
  its finished records are merged into the side's checkpoint (ops/actions/merge.py), atomically. A half
  written subset checkpoint is skipped (the next poll sees it whole), never merged as empty.
- When the attempt ends, a route of its plan whose record now says `Failed - Agent couldn't be set up`,
  and was written by this attempt, counts one more set-up try (state dir, setup_tries.json): the next
  plan gives it another run until runplan.SETUP_RETRIES is spent.
"""
from __future__ import annotations

import json
import os

from ops.actions.launch import LaunchPlan, read_setup_tries, setup_tries_path
from ops.actions.merge import merge_records
from ops.actions.runplan import SETUP_FAILED
from ops.model import RigConfig, SideConfig
from ops.parse.routes import parse_routes
from ops.platform import atomic


def _load(path: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class AttemptFiles:
    def __init__(self, rig: RigConfig, sc: SideConfig, lp: LaunchPlan) -> None:
        self.rig, self.sc, self.lp = rig, sc, lp
        self.main_path = sc.evaluator.path(sc.evaluator.checkpoint)
        self._seen: tuple[float, int] | None = None
        self.merged: list[str] = []
        rf = parse_routes(lp.routes_bytes) if lp.routes_bytes is not None else None
        reps = int(dict(sc.evaluator.args).get("repetitions", "1") or 1)
        self.ids = list(rf.checkpoint_ids(reps)) if rf is not None and hasattr(rf, "checkpoint_ids") else []

    def poll(self) -> list[str]:
        """Merge the subset checkpoint if it changed since the last look; the route ids merged."""
        sub = self.lp.subset
        if sub is None or not self.ids:
            return []
        try:
            st = os.stat(sub.checkpoint)
        except OSError:
            return []
        key = (st.st_mtime, st.st_size)
        if key == self._seen:
            return []
        data = _load(sub.checkpoint)
        if data is None:
            return []            # caught half-written: look again next time
        self._seen = key
        res = merge_records(_load(self.main_path), data, self.ids)
        if res.data is None:
            return []
        atomic.write_bytes(self.main_path, (json.dumps(res.data, indent=4) + "\n").encode())
        self.merged += res.merged
        return list(res.merged)

    def finish(self) -> tuple[list[str], list[str]]:
        """The last merge, then count this attempt's set-up failures; (merged ids, set-up failures)."""
        merged = self.poll()
        before = {r.get("route_id"): r for r in (((_load_bytes(self.lp.checkpoint_bytes) or {})
                                                   .get("_checkpoint") or {}).get("records") or [])}
        now = ((_load(self.main_path) or {}).get("_checkpoint") or {}).get("records") or []
        failed = [r["route_id"] for r in now
                  if isinstance(r, dict) and r.get("status") == SETUP_FAILED
                  and r.get("route_id") in self.lp.runplan.runs and before.get(r.get("route_id")) != r]
        if failed:
            tries = read_setup_tries(self.rig, self.sc.name)
            for cid in failed:
                tries[cid] = tries.get(cid, 0) + 1
            atomic.write_json(setup_tries_path(self.rig, self.sc.name), tries)
        return merged, failed


def _load_bytes(raw: bytes | None) -> dict | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
