"""The supervisor's bookkeeping: budgets, which route failed, the event log of a night.

Kept apart from the harness's process handling (ops/actions/harness.py) so each rule is one small
function a test can call: a spent budget is a sentence saying which one, never a bare False.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ops.model import RigConfig, SideConfig
from ops.parse.checkpoint import RERUN_STATUSES, Checkpoint, parse_checkpoint
from ops.parse.errors import ParseError
from ops.parse.routes import parse_routes
from ops.probes.harness_state import HarnessState, side_dir

HOUR_S = 3600.0
PUTBACK_FILE = "putback.json"   # `retired --put-back`: a request the running supervisor takes
SETUP_FAILED = "Failed - Agent couldn't be set up"


def events_path(rig: RigConfig, side: str) -> Path:
    return side_dir(rig, side) / "events.jsonl"


def append_event(rig: RigConfig, side: str, kind: str, message: str, **fields) -> dict:
    """One line in the side's events.jsonl (O_APPEND, one write). Raises OSError when the dir refuses."""
    rec = {"time": time.time(), "iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "side": side, "kind": kind,
           "message": message, **fields}
    path = events_path(rig, side)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, (json.dumps(rec, default=str) + "\n").encode())
    finally:
        os.close(fd)
    return rec


def read_events(rig: RigConfig, side: str) -> list[dict]:
    try:
        lines = events_path(rig, side).read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class Budgets:
    """The side's budgets against what its state has used. Each check: None (within budget) or why not."""

    sc: SideConfig
    st: HarnessState

    def attempts(self) -> str | None:
        if self.st.attempt >= self.st.max_attempts:
            return f"attempt budget spent: {self.st.attempt} of {self.st.max_attempts} attempts used"
        return None

    def recovery(self, route: str | None) -> str | None:
        cfg = self.sc.supervisor
        if self.st.recoveries >= cfg.max_recoveries:
            return f"recovery budget spent: {self.st.recoveries} of {cfg.max_recoveries} automatic recoveries used"
        if route is not None and self.st.route_recoveries.get(route, 0) >= cfg.max_route_recoveries:
            return (f"route budget spent: {route} already recovered {self.st.route_recoveries.get(route, 0)} times "
                    f"(max_route_recoveries {cfg.max_route_recoveries})")
        return None

    def server_restart(self, now: float | None = None) -> str | None:
        now = time.time() if now is None else now
        recent = [t for t in self.st.server_restarts if now - t < HOUR_S]
        limit = self.sc.supervisor.server_restarts_per_hour
        if len(recent) >= limit:
            return f"server restart budget spent: {len(recent)} restarts in the last hour (max {limit})"
        return None


def read_checkpoint(sc: SideConfig) -> Checkpoint | None:
    try:
        parsed = parse_checkpoint(Path(sc.evaluator.path(sc.evaluator.checkpoint)).read_bytes())
    except OSError:
        return None
    return None if isinstance(parsed, ParseError) else parsed


def route_ids(sc: SideConfig) -> tuple[str, ...]:
    try:
        parsed = parse_routes(Path(sc.evaluator.path(sc.evaluator.routes)).read_bytes())
    except OSError:
        return ()
    return () if isinstance(parsed, ParseError) else parsed.checkpoint_ids()


def current_route(sc: SideConfig, cp: Checkpoint | None = None) -> tuple[str | None, int | None, int | None]:
    """(route id, index, total) of the route the last attempt was on when it failed: a crash or set-up
    failure has written that route's record (the last one); a hang has not (the route at progress[0])."""
    cp = cp if cp is not None else read_checkpoint(sc)
    ids = route_ids(sc)
    if cp is None or cp.progress is None:
        return (ids[0] if ids else None), (0 if ids else None), (len(ids) or None)
    index, total = cp.progress
    if cp.records:
        last = cp.records[-1]
        if last.status in RERUN_STATUSES | {SETUP_FAILED} and last.index == index - 1:
            return last.route_id, last.index, total
    if index < len(ids):
        return ids[index], index, total
    return None, index, total


def failing_route(sc: SideConfig, runs: tuple[str, ...] | list[str]) -> str | None:
    """The route an attempt that ran `runs` (in order) failed on: the first of them that has no record
    now, or whose record is one Bench2Drive re-runs (crash) or a set-up failure. After the subset merge,
    so it holds for fresh, resumed and subset runs alike."""
    cp = read_checkpoint(sc)
    by_id = {r.route_id: r for r in cp.records} if cp is not None else {}
    for rid in runs:
        rec = by_id.get(rid)
        if rec is None or rec.status in RERUN_STATUSES or rec.status == SETUP_FAILED:
            return rid
    return None


def quarantine_due(sc: SideConfig, st: HarnessState, route: str) -> bool:
    n = sc.supervisor.quarantine_after
    return n > 0 and route not in st.retired and st.route_failures.get(route, 0) >= n
