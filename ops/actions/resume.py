"""The resume rule, and the checkpoint backup made before every evaluator launch.

Two Bench2Drive traps decide everything here (design.md §1, §4):
- `--resume` is `argparse type=bool`: `bool("False")` is True, so the only way to say "do not resume"
  is to pass no `--resume` at all. We pass `--resume True` only when the checkpoint holds at least one
  completed route record.
- `route_indexer.validate_and_resume` EMPTIES the checkpoint when `progress[1]` differs from the route
  count of `--routes` (or progress/entry_status is missing, or entry_status is Invalid). So before a
  resume those are checked here, and a mismatch refuses with both numbers.
A checkpoint that cannot be parsed (caught half-written, garbage) is UNKNOWN: refused, never "empty".
The decision is made from the same bytes the backup copies, so what was checked is what was saved.
"""
from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ops.model import RigConfig, SideConfig
from ops.parse.checkpoint import RERUN_STATUSES, completed_records, parse_checkpoint, resume_index
from ops.parse.errors import ParseError
from ops.parse.routes import parse_routes
from ops.platform import atomic
from ops.platform.bounded import read_regular
from ops.platform.files import MAX_READ
from ops.probes.harness_state import side_dir

RESUME_FLAG = ("--resume", "True")

# Values of the guard's "checkpoint" verdict (ops/actions/guard.py RULES[Op.RELAUNCH] allows OK and ABSENT).
CP_OK: Final = "OK"
CP_ABSENT: Final = "ABSENT"
CP_MISMATCH: Final = "MISMATCH"
CP_UNKNOWN: Final = "UNKNOWN"


@dataclass(frozen=True)
class ResumeDecision:
    resume: bool                 # pass `--resume True` (never `--resume False`)
    reason: str                  # why, in words (shown as resume_reason)
    verdict: Literal["OK", "ABSENT", "MISMATCH", "UNKNOWN"]   # the guard's "checkpoint" verdict
    refused: str | None = None   # set for MISMATCH / UNKNOWN
    completed: int | None = None
    total: int | None = None     # the checkpoint's progress[1]
    routes: int | None = None    # the routes file's route count (read only when resuming)

    @property
    def flag(self) -> tuple[str, ...]:
        return RESUME_FLAG if self.resume else ()


def decide(checkpoint: bytes | None, routes: bytes | None | ParseError | str = None,
           repetitions: int = 1, subset: str | None = None) -> ResumeDecision:
    """The rule, pure. checkpoint: the file's bytes, None when it does not exist. routes: the routes
    file's bytes (needed only when resuming), or an error string / ParseError when it could not be read.
    repetitions / subset: the evaluator's `--repetitions` / `--routes-subset` (both change its total)."""
    if checkpoint is None:
        return ResumeDecision(False, "no checkpoint yet: fresh start (no --resume)", CP_ABSENT)
    cp = parse_checkpoint(checkpoint)
    if isinstance(cp, ParseError):
        why = f"checkpoint unreadable, progress UNKNOWN ({cp.reason}): not treated as empty"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why)
    done = len(completed_records(cp))
    total = cp.progress[1] if cp.progress else None
    if done == 0:
        return ResumeDecision(False, "checkpoint holds no completed route record: fresh start (no --resume)",
                              CP_OK, completed=0, total=total)
    if resume_index(cp) is None:
        why = (f"checkpoint holds {done} completed record(s) but its progress/entry_status "
               f"({cp.progress}, {cp.entry_status!r}) would make Bench2Drive reject the resume and empty the file")
        return ResumeDecision(False, why, CP_MISMATCH, refused=why, completed=done, total=total)
    assert total is not None  # resume_index() is None without progress
    if routes is None or isinstance(routes, (str, ParseError)):
        why = f"routes file unreadable, route count UNKNOWN ({routes or 'not read'}): cannot check the resume"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why, completed=done, total=total)
    rf = parse_routes(routes)
    if isinstance(rf, ParseError):
        why = f"routes file unparseable, route count UNKNOWN ({rf.reason}): cannot check the resume"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why, completed=done, total=total)
    if subset:
        why = (f"--routes-subset {subset!r} is set: the console cannot count its routes, so the resume "
               "check is UNKNOWN")
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why, completed=done, total=total)
    ids = rf.checkpoint_ids(repetitions)
    if len(ids) != total:
        why = (f"checkpoint total progress[1]={total} but the routes file has {len(ids)} routes"
               + (f" ({rf.count} x {repetitions} repetitions)" if repetitions != 1 else "")
               + ": Bench2Drive would empty the checkpoint on resume; refused (fix --routes or the checkpoint)")
        return ResumeDecision(False, why, CP_MISMATCH, refused=why, completed=done, total=total, routes=len(ids))
    # validate_and_resume also wipes when a record before progress[0] names another route than the
    # routes file at that position (it stops checking at the first record it will re-run).
    for i, rec in enumerate(cp.records[:min(cp.progress[0], len(cp.records))] if cp.progress else ()):
        if rec.route_id != ids[i]:
            why = (f"checkpoint record {i} is {rec.route_id} but the routes file has {ids[i]} there: "
                   "Bench2Drive would empty the checkpoint on resume; refused")
            return ResumeDecision(False, why, CP_MISMATCH, refused=why, completed=done, total=total,
                                  routes=len(ids))
        if rec.status in RERUN_STATUSES:
            break
    return ResumeDecision(True, f"{done} of {total} routes completed: --resume True", CP_OK,
                          completed=done, total=total, routes=len(ids))


@dataclass(frozen=True)
class CheckpointRead:
    data: bytes | None           # None: the file does not exist
    error: str | None = None     # could not read: UNKNOWN


def read_bytes(path: str) -> CheckpointRead:
    """The exact bytes (the backup must be identical; a decode/encode round trip could change them)."""
    try:
        return CheckpointRead(read_regular(path, MAX_READ))
    except FileNotFoundError:
        return CheckpointRead(None)
    except OSError as e:
        return CheckpointRead(None, f"read {path}: {e}")


def decide_for(side: SideConfig) -> tuple[ResumeDecision, CheckpointRead]:
    """Read the side's checkpoint (and, when resuming, its routes file) from this machine and decide."""
    ev = side.evaluator
    cp = read_bytes(ev.path(ev.checkpoint))
    if cp.error:
        why = f"checkpoint UNKNOWN: {cp.error}"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why), cp
    if cp.data is None:
        return decide(None), cp
    # The routes file matters only for a resume; decide() ignores it otherwise (a missing one included).
    return decide_read(side, cp.data, read_bytes(ev.path(ev.routes))), cp


def decide_read(side: SideConfig, checkpoint: bytes, rt: CheckpointRead) -> ResumeDecision:
    """The decision on a checkpoint and the routes file as read (on this machine or the evaluator's host)."""
    ev = side.evaluator
    routes: bytes | str = rt.data if rt.data is not None else (rt.error or f"{ev.path(ev.routes)} does not exist")
    args = dict(ev.args)
    try:
        reps = int(args.get("repetitions", "1"))
    except ValueError:
        why = f"evaluator arg repetitions={args['repetitions']!r} is not an integer: route count UNKNOWN"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why)
    return decide(checkpoint, routes, repetitions=reps, subset=args.get("routes-subset") or None)


# ---- backup ---------------------------------------------------------------------------------------


def backups_dir(rig: RigConfig, side: str) -> Path:
    return side_dir(rig, side) / "backups"


def backup_name(checkpoint_path: str, at: float | None = None) -> str:
    """result.json → result.20250101T120000.123456.json (microseconds: two launches a second apart differ)."""
    at = time.time() if at is None else at
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(at)) + f".{int((at % 1) * 1e6):06d}"
    base = posixpath.basename(checkpoint_path)
    stem, ext = os.path.splitext(base)
    return f"{stem}.{stamp}{ext or '.json'}"


def planned_backup(rig: RigConfig, side: SideConfig, exists: bool) -> str | None:
    """The path a backup would get now (dry-run shows it); None when there is no checkpoint to copy."""
    if not exists:
        return None
    return str(backups_dir(rig, side.name) / backup_name(side.evaluator.checkpoint))


def backup(rig: RigConfig, side: SideConfig, data: bytes | None) -> str | None:
    """Write `data` (the checkpoint's bytes, as read for the decision) to a new timestamped file.

    Atomic (tmp + fsync + rename) so a crash never leaves a half backup that looks whole; the original
    is only ever read. Returns the backup's path, None when there was no checkpoint.
    """
    if data is None:
        return None
    d = backups_dir(rig, side.name)
    d.mkdir(parents=True, exist_ok=True)
    path = d / backup_name(side.evaluator.checkpoint)
    n = 1
    while path.exists():  # same microsecond: never overwrite an earlier backup
        path = d / f"{path.stem}-{n}{path.suffix}"
        n += 1
    atomic.write_bytes(path, data)
    return str(path)
