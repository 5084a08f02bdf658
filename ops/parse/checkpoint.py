"""The Bench2Drive / Leaderboard 2.x checkpoint (`--checkpoint` result JSON), rewritten after every route.

Shape (statistics_manager.py): `{"_checkpoint": {"global_record", "progress": [index, total],
"records": [...]}, "entry_status", "eligible", "sensors", "values", "labels"}`.

The file is rewritten in place (`open(..., 'w')` then `json.dump`), so a reader can catch it empty or
half-written. That is a ParseError (UNKNOWN progress), never "zero routes done": a zero would make the
resume rule start from scratch, and Bench2Drive would then overwrite the real results.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ops.parse.errors import ParseError, as_text

WHAT = "bench2drive checkpoint"
# 28 real routes take 88 KB (min-speed messages dominate); 220 routes stay near 1 MB. 8 MB is generous
# and still parses in well under a second.
MAX_CHARS = 8_000_000

STARTED = "Started"  # a record whose route is running (or died before its statistics were computed)
ENTRY_STATUSES = ("Started", "Finished", "Rejected", "Crashed", "Invalid")
# route_indexer.validate_and_resume re-runs the first record with one of these statuses.
RERUN_STATUSES = frozenset({"Failed", "Failed - Simulation crashed", "Failed - Agent crashed"})

# statistics_manager.PENALTY_VALUE_DICT: each event multiplies the route's penalty by its factor.
PENALTY_FACTORS: Mapping[str, float] = {
    "collisions_pedestrian": 0.5,
    "collisions_vehicle": 0.6,
    "collisions_layout": 0.65,
    "red_light": 0.7,
    "stop_infraction": 0.8,
    "scenario_timeouts": 0.7,
    "yield_emergency_vehicle_infractions": 0.7,
}
# Counted as infractions but with no effect on the penalty: min-speed is 'unused' in Bench2Drive, the
# route-ending ones (route_dev, vehicle_blocked, route_timeout) act through score_route instead.
NO_PENALTY = frozenset({"min_speed_infractions", "route_dev", "vehicle_blocked", "route_timeout"})
OUTSIDE_LANES = "outside_route_lanes"
MIN_SPEED = "min_speed_infractions"
# Bench2Drive's message: "Agent went outside its route lanes for about 14.0 meters (10.6% of the
# completed route)". The percentage is printed with one decimal; the penalty used the exact value.
_OUTSIDE_PCT = re.compile(r"\(([0-9]+(?:\.[0-9]+)?)% of the completed route\)")


@dataclass(frozen=True)
class RouteRecord:
    index: int
    route_id: str                   # "RouteScenario_<id>_rep<n>"
    status: str                     # Perfect | Completed | Failed[ - reason] | Started
    score_composed: float | None    # None: the field was absent (unknown), not 0
    score_route: float | None
    score_penalty: float | None
    infractions: dict[str, int] = field(default_factory=dict, hash=False)  # name -> number of events
    duration_game: float | None = None
    duration_system: float | None = None
    route_length: float | None = None
    town_name: str | None = None
    scenario_name: str | None = None
    # The off-lanes share (%) read from the outside_route_lanes messages: 0.0 when there is none,
    # None when a message is there but unreadable.
    outside_lanes_pct: float | None = None

    @property
    def finished(self) -> bool:
        """The route ran to a verdict (any status but Started)."""
        return self.status != STARTED

    @property
    def wall_game_ratio(self) -> float | None:
        return _ratio(self.duration_system, self.duration_game)


@dataclass(frozen=True)
class Checkpoint:
    progress: tuple[int, int] | None  # (index, total); None when absent or [] (Bench2Drive's initial value)
    records: tuple[RouteRecord, ...]
    entry_status: str | None
    eligible: bool | None = None
    global_score_composed: float | None = None  # global_record.scores_mean: Bench2Drive's own DS


class _Bad(Exception):
    """Internal: a field has the wrong type or value. Never leaves this module."""


def parse_checkpoint(text: str | bytes) -> Checkpoint | ParseError:
    """Parse the checkpoint file's text; never raises."""
    checked = as_text(WHAT, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    if not checked.strip():
        return ParseError.of(WHAT, "empty file (being rewritten, or emptied by a rejected resume)", checked)
    try:
        data = json.loads(checked, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return ParseError.of(WHAT, f"not valid JSON (half-written?): {exc.msg} at {exc.pos}", checked, exc.pos)
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, a 5000-digit int, absurd nesting
        return ParseError.of(WHAT, f"not acceptable JSON: {exc}", checked)
    try:
        return _checkpoint(data)
    except _Bad as exc:
        return ParseError.of(WHAT, str(exc), checked)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number Bench2Drive writes")


def _checkpoint(data: object) -> Checkpoint:
    if not isinstance(data, dict):
        raise _Bad(f"top level is {type(data).__name__}, not an object")
    inner = data.get("_checkpoint")
    if not isinstance(inner, dict):
        raise _Bad("no '_checkpoint' object")
    records = inner.get("records")
    if not isinstance(records, list):
        raise _Bad(f"'_checkpoint.records' is {type(records).__name__}, not a list")
    entry_status = data.get("entry_status")
    if entry_status is not None and not isinstance(entry_status, str):
        raise _Bad("'entry_status' is not a string")
    eligible = data.get("eligible")
    if eligible is not None and not isinstance(eligible, bool):
        raise _Bad("'eligible' is not a boolean")
    return Checkpoint(progress=_progress(inner.get("progress")),
                      records=tuple(_record(i, r) for i, r in enumerate(records)),
                      entry_status=entry_status, eligible=eligible,
                      global_score_composed=_global_ds(inner.get("global_record")))


def _progress(value: object) -> tuple[int, int] | None:
    if value is None or value == []:
        return None  # Bench2Drive's Checkpoint starts with progress = []: "not yet saved", not (0, 0)
    if not (isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value)):
        raise _Bad(f"'progress' is not [index, total]: {json.dumps(value)[:80]}")
    done, total = value
    if not 0 <= done <= total:
        raise _Bad(f"'progress' {value} is impossible (need 0 <= index <= total)")
    return done, total


def _record(pos: int, rec: object) -> RouteRecord:
    if not isinstance(rec, dict):
        raise _Bad(f"record #{pos} is not an object")
    index, route_id, status = rec.get("index"), rec.get("route_id"), rec.get("status")
    if not _is_int(index):
        raise _Bad(f"record #{pos}: 'index' is not an integer")
    if not isinstance(route_id, str) or not isinstance(status, str) or not status:
        raise _Bad(f"record #{pos}: 'route_id' or 'status' is not a string")
    scores, meta = _obj(rec, "scores", pos), _obj(rec, "meta", pos)
    counts, outside_pct = _infractions(rec.get("infractions"), pos)
    return RouteRecord(
        index=int(index or 0), route_id=route_id, status=status,
        score_composed=_num(scores, "score_composed", pos), score_route=_num(scores, "score_route", pos),
        score_penalty=_num(scores, "score_penalty", pos), infractions=counts,
        duration_game=_num(meta, "duration_game", pos), duration_system=_num(meta, "duration_system", pos),
        route_length=_num(meta, "route_length", pos),
        town_name=_opt_str(rec, "town_name", pos), scenario_name=_opt_str(rec, "scenario_name", pos),
        outside_lanes_pct=outside_pct)


def _infractions(value: object, pos: int) -> tuple[dict[str, int], float | None]:
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        raise _Bad(f"record #{pos}: 'infractions' is not an object")
    counts: dict[str, int] = {}
    for name, events in value.items():
        if not isinstance(events, list):
            raise _Bad(f"record #{pos}: infraction {name!r} is not a list of messages")
        counts[name] = len(events)
    return counts, _outside_pct(value.get(OUTSIDE_LANES) or [])


def _outside_pct(messages: list[Any]) -> float | None:
    """The off-lanes share as one percentage; several events combine as Bench2Drive multiplies them."""
    keep = 1.0
    pcts: list[float] = []
    for msg in messages:
        m = _OUTSIDE_PCT.search(msg) if isinstance(msg, str) else None
        if m is None:
            return None
        pcts.append(min(float(m.group(1)), 100.0))
        keep *= 1.0 - pcts[-1] / 100.0
    # One event (the usual case) keeps its printed value exactly; several combine multiplicatively.
    return pcts[0] if len(pcts) == 1 else (1.0 - keep) * 100.0


def _obj(rec: dict, key: str, pos: int) -> dict:
    value = rec.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"record #{pos}: '{key}' is not an object")
    return value


def _num(obj: dict, key: str, pos: int) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad(f"record #{pos}: {key!r} is not a number")
    return float(value)


def _opt_str(rec: dict, key: str, pos: int) -> str | None:
    value = rec.get(key)
    if value is not None and not isinstance(value, str):
        raise _Bad(f"record #{pos}: {key!r} is not a string")
    return value


def _global_ds(value: object) -> float | None:
    """Bench2Drive's own mean DS, when the global record holds one; a malformed one is just absent."""
    if not isinstance(value, dict) or not isinstance(value.get("scores_mean"), dict):
        return None
    ds = value["scores_mean"].get("score_composed")
    if isinstance(ds, bool) or not isinstance(ds, (int, float)) or not math.isfinite(ds):
        return None
    return float(ds)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a route count


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


# ---- helpers over a parsed checkpoint -------------------------------------------------------------


def completed_records(cp: Checkpoint) -> tuple[RouteRecord, ...]:
    """Records whose route reached a verdict (status other than Started), in file order.

    This is what the resume rule asks: Bench2Drive resumes after records that are done (including
    Failed ones, which it re-runs itself), so `--resume True` makes sense only when this is non-empty.
    A Started record is a route that was running when the file was written: not done.
    """
    return tuple(r for r in cp.records if r.finished)


def driving_score(cp: Checkpoint) -> float | None:
    """Mean score_composed over the finished records; None when there is none or one lacks its score.

    This is the DS of the routes run so far. Bench2Drive's global_record divides by the total route
    count instead, so the two agree only once every route has run.
    """
    scores = [r.score_composed for r in completed_records(cp)]
    if not scores or any(s is None for s in scores):
        return None
    return sum(s for s in scores if s is not None) / len(scores)


def is_success(rec: RouteRecord) -> bool:
    """Completed or Perfect, and no infraction except min-speed (which Bench2Drive does not penalise)."""
    if rec.status not in ("Completed", "Perfect"):
        return False
    return all(count == 0 for name, count in rec.infractions.items() if name != MIN_SPEED)


def success_rate(cp: Checkpoint) -> float | None:
    """Share of finished records that are a success (is_success); None when none has finished."""
    done = completed_records(cp)
    if not done:
        return None
    return sum(1 for r in done if is_success(r)) / len(done)


def last_status(cp: Checkpoint) -> str | None:
    """The status of the highest-index record (the route run last), or None when there is no record."""
    if not cp.records:
        return None
    return max(enumerate(cp.records), key=lambda pr: (pr[1].index, pr[0]))[1].status


def wall_game_ratio(cp: Checkpoint) -> float | None:
    """Total system (wall) time over total game time of the finished records.

    About 1x or less for a model that should be slow means it is not really inferring. None when any
    finished record lacks a duration (one unknown makes the sum unknown) or no game time elapsed.
    """
    done = completed_records(cp)
    walls = [r.duration_system for r in done]
    games = [r.duration_game for r in done]
    if not done or any(v is None for v in walls + games):
        return None
    return _ratio(sum(w for w in walls if w is not None), sum(g for g in games if g is not None))


def penalty_for(infractions: Mapping[str, int], outside_lanes_pct: float = 0.0) -> float:
    """The route's infraction penalty, as Bench2Drive's statistics_manager computes it.

    Each counted event multiplies by its factor (PENALTY_FACTORS); min-speed and the route-ending
    events have none; outside_route_lanes is a percentage (its factor is 0, 'increases'), so it
    multiplies by (1 - pct / 100) rather than by a fixed factor per event.
    """
    penalty = 1.0
    for name, count in infractions.items():
        factor = PENALTY_FACTORS.get(name)
        if factor is not None and count > 0:
            penalty *= factor ** count
    return penalty * (1.0 - max(0.0, min(outside_lanes_pct, 100.0)) / 100.0)


def record_penalty(rec: RouteRecord) -> float | None:
    """penalty_for() of one record; None when it went off its lanes but the share is unreadable."""
    pct = rec.outside_lanes_pct
    if pct is None:
        if rec.infractions.get(OUTSIDE_LANES, 0) > 0:
            return None
        pct = 0.0
    return penalty_for(rec.infractions, pct)


def resume_index(cp: Checkpoint) -> int | None:
    """The route index Bench2Drive's validate_and_resume would restart at, route ids aside.

    None when Bench2Drive would reject the resume (and empty the file): no progress or entry_status,
    or entry_status Invalid. Route-count and route-id checks need the routes file: see ops/parse/routes.
    """
    if cp.progress is None or not cp.entry_status or cp.entry_status == "Invalid":
        return None
    at = cp.progress[0]
    for i in range(min(at, len(cp.records))):
        if cp.records[i].status in RERUN_STATUSES:
            at = i
            break
    if cp.progress[0] > len(cp.records) and at == cp.progress[0]:
        at = max(len(cp.records) - 1, 0)  # its IndexError patch: progress ahead of the records
    if cp.entry_status == "Crashed":
        return max(0, at - 1)  # "something went wrong, repeat the last route"
    return max(0, at)
