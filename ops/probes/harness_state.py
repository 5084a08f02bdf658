"""The harness's state file (state_dir/sides/SIDE/harness.json): attempts, pids, exit codes, times.

Written atomically by the harness (tmp + rename) so a reader never sees half a file; read by every console
to rediscover running sides after it was closed or lost its SSH session.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ops.model import RigConfig
from ops.platform import atomic
from ops.platform.bounded import read_regular
from ops.probes.server import ServerMeasure

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
    # Its last measurement of the side's server (HUNG takes K probes over T s: `status` shows this one).
    server_measure: ServerMeasure | None = None

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


MAX_STATE_BYTES = 1 << 20   # a state of a few hundred attempts is tens of KB


def _conforms(value: Any, hint: Any) -> bool:
    """value matches a field's annotation (int, float, str, bool, X | None, Literal[...], list[X], dict[K, V],
    a dataclass)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        key, val = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(_conforms(k, key) and _conforms(v, val) for k, v in value.items())
    if origin is not None:   # another generic: its container type at least (never isinstance on a generic)
        return isinstance(value, origin)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    return isinstance(value, hint)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """get_type_hints evaluates every annotation string: milliseconds a call, and a state is parsed every
    poll of every side. The classes do not change while the console runs."""
    return typing.get_type_hints(cls)


def _build(cls: type, data: Any, where: str) -> Any:
    """An instance of the dataclass cls from JSON data, every known field type-checked; keys this version
    does not know are left out (a newer harness may write more)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is {type(data).__name__}, not an object")
    hints = _hints(cls)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}.{f.name} is missing")
            continue
        value = data[f.name]
        if not _conforms(value, hints[f.name]):
            raise ValueError(f"{where}.{f.name} is {value!r:.80}, not {hints[f.name]}")
        kw[f.name] = value
    return kw


def parse_state(data: Any) -> HarnessState:
    """A HarnessState from harness.json's JSON value; ValueError naming the first field that is wrong."""
    kw = _build(HarnessState, data, "harness.json")
    kw["attempts"] = [AttemptRecord(**_build(AttemptRecord, a, f"harness.json.attempts[{i}]"))
                      for i, a in enumerate(kw.get("attempts", []))]
    if kw.get("server_measure") is not None:
        kw["server_measure"] = ServerMeasure(**_build(ServerMeasure, kw["server_measure"],
                                                      "harness.json.server_measure"))
    return HarnessState(**kw)


def read_state(rig: RigConfig, side: str) -> HarnessState | None | str:
    """The state, None when there is none, or an error string when it cannot be read or is malformed
    (null, a string, a number, a wrong field: the caller answers UNKNOWN with this as evidence)."""
    path = state_path(rig, side)
    try:
        return parse_state(json.loads(read_regular(path, MAX_STATE_BYTES)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as e:
        return f"unreadable {path}: {e}"


class StateCache:
    """A remote side's state file as last read and parsed, by host and path: a prober reads it every full
    poll, and it changes once an attempt or a recovery. Owned by whoever polls (the Prober); a reader never
    mutates a state it was handed."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], tuple[str, HarnessState, tuple | None]] = {}

    def parse(self, host: str, path: str, text: str, stat_key: tuple | None = None) -> HarnessState | None | str:
        seen = self._parsed.get((host, path))
        if seen is not None and seen[0] == text:
            self._parsed[(host, path)] = (text, seen[1], stat_key)
            return seen[1]
        state = _parse_text(text, f"{path} on {host}")
        if isinstance(state, HarnessState):
            self._parsed[(host, path)] = (text, state, stat_key)
        return state

    def unchanged(self, host: str, path: str, stat_key: tuple) -> HarnessState | None:
        """The state parsed from the file whose (mtime, size) was stat_key, if that is still the file."""
        seen = self._parsed.get((host, path))
        return seen[1] if seen is not None and seen[2] == stat_key else None


# A file's mtime has the kernel's coarse clock (a few ms; more on a network filesystem): two writes of one
# size within one tick look the same to a stat. A state file is known by its stat only once its mtime is
# this much older than the stat: a later write then has a later mtime.
SETTLED_S = 1.0


def _parse_text(text: str, where: str) -> HarnessState | str:
    try:
        return parse_state(json.loads(text))
    except (ValueError, TypeError, RecursionError) as e:
        return f"unreadable {where}: {e}"


async def read_state_on(host: Any, rig: RigConfig, side: str, timeout: float,
                        cache: StateCache | None = None, within_s: float = 0.0) -> HarnessState | None | str:
    """read_state on the side's evaluator host: this machine's file directly, another host's through its
    platform (a bounded read with a timeout: a supervisor on a remote host writes its state there).
    within_s > 0 (a display's beat): a stat that recent (an agent's push) shows whether the file changed
    since the cache read it; unchanged, it is not read again."""
    if host.is_local:
        return read_state(rig, side)
    path = str(state_path(rig, side))
    key = None
    if cache is not None and within_s > 0:
        st = await host.platform.stat_file(path, timeout, within_s)
        if st.error is None and not st.exists:
            return None
        if st.error is None and st.mtime is not None and st.host_now is not None:
            hit = cache.unchanged(host.name, path, (st.mtime, st.size))
            if hit is not None:
                return hit
            key = (st.mtime, st.size) if st.host_now - st.mtime >= SETTLED_S else None
    ft = await host.platform.read_text(path, timeout, MAX_STATE_BYTES)
    if ft.missing:
        return None
    if ft.text is None:
        return f"unreadable {path} on {host.name}: {ft.error}"
    if cache is not None:
        return cache.parse(host.name, path, ft.text, key)
    return _parse_text(ft.text, f"{path} on {host.name}")
