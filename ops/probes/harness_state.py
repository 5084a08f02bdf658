"""The harness's state file (state_dir/sides/SIDE/harness.json): attempts, pids, exit codes, times.

Written atomically by the harness (tmp + rename) so a reader never sees half a file; read by every console
to rediscover running sides after it was closed or lost its SSH session.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from ops.model import RigConfig
from ops.platform import atomic

HarnessStatus = Literal["starting", "running", "resuming", "finished", "failed", "gave_up", "stopped", "refused"]
SupervisorState = Literal["watching", "recovering", "restarting-server", "waiting", "needs-human", "gave-up", "done"]


@dataclass
class AttemptRecord:
    n: int
    started: float
    resume: bool
    argv: list[str]
    evaluator_pid: int | None = None
    evaluator_create_time: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    backup: str | None = None


@dataclass
class HarnessState:
    side: str
    pid: int
    create_time: float
    max_attempts: int
    status: HarnessStatus = "starting"
    attempt: int = 0
    detail: str = ""
    updated: float = 0.0
    attempts: list[AttemptRecord] = field(default_factory=list)
    # The supervisor (ops/actions/harness.py): what it does now, and the budgets it has used. Never reset:
    # an adopting supervisor continues these counts.
    supervisor: SupervisorState = "watching"
    recoveries: int = 0
    route_recoveries: dict[str, int] = field(default_factory=dict)
    route_failures: dict[str, int] = field(default_factory=dict)
    server_restarts: list[float] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    unsaved: str | None = None   # set while the state dir refuses writes: the supervisor works from memory

    def to_json(self) -> dict:
        return asdict(self)


def side_dir(rig: RigConfig, side: str) -> Path:
    return _side_dir(rig.state_dir, side)


def state_path(rig: RigConfig, side: str) -> Path:
    return _state_path(rig.state_dir, side)


# Every poll reads each side's state: building the Path anew (pathlib parses each part) cost more than
# reading the file. Paths are immutable, so one per (state_dir, side) serves every caller.
@functools.lru_cache(maxsize=256)
def _side_dir(state_dir: str, side: str) -> Path:
    return Path(state_dir) / "sides" / side


@functools.lru_cache(maxsize=256)
def _state_path(state_dir: str, side: str) -> Path:
    return _side_dir(state_dir, side) / "harness.json"


def write_state(rig: RigConfig, st: HarnessState) -> None:
    atomic.write_json(state_path(rig, st.side), st.to_json())


def read_state(rig: RigConfig, side: str) -> HarnessState | None | str:
    """The state, None when there is none, or an error string when it cannot be read."""
    path = state_path(rig, side)
    try:
        data = json.loads(path.read_text())
        attempts = [AttemptRecord(**a) for a in data.pop("attempts", [])]
        return HarnessState(**data, attempts=attempts)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        return f"unreadable {path}: {e}"
