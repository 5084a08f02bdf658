"""Reading checkpoints and routes files for results, compare and split: local files, folders, a rig.

Every problem is collected and reported with the file it concerns; nothing here writes or moves a file.
A rig's checkpoint may be caught mid-rewrite (the normal case for a reader): it is read again a few
times before it is reported unreadable.
"""
from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ops.parse.checkpoint import MAX_CHARS as CHECKPOINT_MAX
from ops.parse.checkpoint import Checkpoint, parse_checkpoint
from ops.parse.errors import ParseError
from ops.parse.routes import MAX_CHARS as ROUTES_MAX
from ops.results.merge import Source
from ops.results.routes_xml import RoutesTable, parse_routes_table

SKIP_NAMES = frozenset({"merged.json"})   # Bench2Drive's merge_route_json.py output, not a checkpoint
HALF_WRITTEN_RETRIES = 5
RETRY_PAUSE_S = 0.2


@dataclass(frozen=True)
class Loaded:
    sources: tuple[Source, ...] = ()
    errors: tuple[str, ...] = ()      # each names its file
    skipped: tuple[str, ...] = ()     # files in a folder that are not checkpoints, with why


def _read_bytes(path: str, limit: int) -> bytes | str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        return f"{path}: cannot read: {e.strerror or e}"
    if len(data) > limit:
        return f"{path}: larger than {limit} bytes"
    return data


def read_routes(path: str) -> RoutesTable | str:
    data = _read_bytes(path, ROUTES_MAX)
    if isinstance(data, str):
        return data
    table = parse_routes_table(data)
    return f"{path}: {table}" if isinstance(table, ParseError) else table


def read_checkpoint(path: str) -> Checkpoint | str:
    data = _read_bytes(path, CHECKPOINT_MAX)
    if isinstance(data, str):
        return data
    cp = parse_checkpoint(data)
    return f"{path}: {cp.what}: {cp.reason}" if isinstance(cp, ParseError) else cp


def _looks_like_checkpoint(path: str) -> bool:
    data = _read_bytes(path, CHECKPOINT_MAX)
    if isinstance(data, str):
        return True  # let read_checkpoint report the error with the file named
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return True  # half-written or broken: an error to report, not a file to skip silently
    return isinstance(parsed, dict) and "_checkpoint" in parsed


def expand(paths: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """Files named, and the *.json of folders named (sorted): (files, skipped, errors)."""
    files: list[str] = []
    skipped: list[str] = []
    errors: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if n.endswith(".json"))
            for n in names:
                full = os.path.join(p, n)
                if n in SKIP_NAMES or not _looks_like_checkpoint(full):
                    skipped.append(f"{full}: not a checkpoint (no '_checkpoint')")
                else:
                    files.append(full)
            if not names:
                errors.append(f"{p}: folder holds no *.json")
        elif os.path.exists(p):
            files.append(p)
        else:
            errors.append(f"{p}: no such file or folder")
    return files, skipped, errors


def load_files(paths: Sequence[str]) -> Loaded:
    files, skipped, errors = expand(paths)
    sources: list[Source] = []
    for f in files:
        cp = read_checkpoint(f)
        if isinstance(cp, str):
            errors.append(cp)
        else:
            sources.append(Source(f, cp))
    return Loaded(tuple(sources), tuple(errors), tuple(skipped))


@dataclass(frozen=True)
class SideRead:
    side: str
    checkpoint: Checkpoint | None
    routes: RoutesTable | None
    errors: tuple[str, ...] = ()
    missing_checkpoint: bool = False      # not written yet: no records, not an error
    retired: tuple[str, ...] = ()
    attempts: int | None = None
    route_failures: dict[str, int] = field(default_factory=dict)
    expect_wall_game_min: float | None = None
    checkpoint_path: str = ""
    routes_path: str = ""


@dataclass(frozen=True)
class RigRead:
    sides: tuple[SideRead, ...] = field(default_factory=tuple)

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(e for s in self.sides for e in s.errors)

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(Source(f"side:{s.side}", s.checkpoint) for s in self.sides if s.checkpoint is not None)

    @property
    def retired(self) -> tuple[str, ...]:
        return tuple(r for s in self.sides for r in s.retired)

    @property
    def route_failures(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.sides:
            for rid, n in s.route_failures.items():
                out[rid] = out.get(rid, 0) + n
        return out


async def read_side(rig, side, host, timeout: float = 10.0) -> SideRead:
    """One side's checkpoint and routes file through its evaluator's host (local or SSH)."""
    from ops.platform.files import read_text  # keeps the pure file readers above import-light
    ev = side.evaluator
    cp_path, routes_path = ev.path(ev.checkpoint), ev.path(ev.routes)
    errors: list[str] = []
    checkpoint: Checkpoint | None = None
    missing = False
    for attempt in range(HALF_WRITTEN_RETRIES):
        ft = await read_text(host, cp_path, timeout, limit=CHECKPOINT_MAX)
        if ft.missing:
            missing = True
            break
        if ft.text is None:
            errors.append(f"side {side.name}: {cp_path}: {ft.error}")
            break
        parsed = parse_checkpoint(ft.text)
        if not isinstance(parsed, ParseError):
            checkpoint = parsed
            break
        if attempt == HALF_WRITTEN_RETRIES - 1:
            errors.append(f"side {side.name}: {cp_path}: {parsed.reason}")
        await asyncio.sleep(RETRY_PAUSE_S)
    routes: RoutesTable | None = None
    ft = await read_text(host, routes_path, timeout, limit=ROUTES_MAX)
    if ft.text is None:
        errors.append(f"side {side.name}: {routes_path}: {'no such file' if ft.missing else ft.error}")
    else:
        parsed_routes = parse_routes_table(ft.text.encode("utf-8"))
        if isinstance(parsed_routes, ParseError):
            errors.append(f"side {side.name}: {routes_path}: {parsed_routes.reason}")
        else:
            routes = parsed_routes
    retired, attempts, failures = await _harness_facts(rig, side.name, host, timeout)
    return SideRead(side=side.name, checkpoint=checkpoint, routes=routes, errors=tuple(errors),
                    missing_checkpoint=missing, retired=retired, attempts=attempts, route_failures=failures,
                    expect_wall_game_min=side.expect_wall_game_min,
                    checkpoint_path=cp_path, routes_path=routes_path)


async def _harness_facts(rig, side: str, host, timeout: float) -> tuple[tuple[str, ...], int | None, dict[str, int]]:
    """The supervisor's retired route ids, evaluator attempt count and per-route failure counts, from its
    state file where it keeps them, on the side's evaluator host (getattr: a harness older than the
    supervisor has no such fields)."""
    from ops.probes.harness_state import read_state_on
    from ops.results.attempts import failures_of
    st = await read_state_on(host, rig, side, timeout)
    if st is None or isinstance(st, str):
        return (), None, {}
    retired = getattr(st, "retired", None) or ()
    return tuple(str(r) for r in retired), getattr(st, "attempt", None), failures_of([st])


async def read_rig(rig, sides: Sequence[str] | None = None, timeout: float = 10.0) -> RigRead:
    """Every named side (default: all) read concurrently; one bad host never stalls the others' reads."""
    from ops.platform.factory import make_hosts
    names = list(sides) if sides else list(rig.sides)
    needed = {rig.sides[n].evaluator.host for n in names}
    hosts = await make_hosts({h: rig.hosts[h] for h in needed})
    try:
        done = await asyncio.gather(*(read_side(rig, rig.sides[n], hosts[rig.sides[n].evaluator.host], timeout)
                                      for n in names))
    finally:
        for h in hosts.values():
            await h.close()
    return RigRead(sides=tuple(done))
