"""Merge the records of several checkpoints against one routes file, by Bench2Drive's rules.

Bench2Drive's tools/merge_route_json.py: DS = Σ score_composed / 220 and SR = (routes Completed or
Perfect whose infractions other than min_speed_infractions are all empty) / 220. Here the denominator is
the number of routes in the given routes file (not a hard-coded 220), a route without a record counts 0,
and what that tool gets wrong is fixed and named:
- a route recorded twice (two files, or twice in one) counts once: the first record in the order the
  sources were given (the order is the operator's statement of precedence); every duplicate is named;
- records whose route is not in the routes file are named and not counted;
- routes without a record are named as missing, or as retired when the supervisor retired them.
"""
from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ops.parse.checkpoint import Checkpoint, RouteRecord, is_success
from ops.results.abilities import AbilityScore, abilities_of, score_abilities
from ops.results.routes_xml import RouteInfo

DUPLICATE_RULE = "first record in source order counts"
_CP_ID = re.compile(r"^RouteScenario_(.+)_rep(\d+)$")


@dataclass(frozen=True)
class Source:
    label: str                    # a file path or "side:NAME"
    checkpoint: Checkpoint


@dataclass(frozen=True)
class RouteRow:
    route: RouteInfo
    record: RouteRecord | None    # the record that counts; None: missing or retired
    source: str | None            # label of the source it came from
    retired: bool = False

    @property
    def state(self) -> str:
        if self.record is not None:
            return "recorded"
        return "retired" if self.retired else "missing"

    @property
    def success(self) -> bool | None:
        """Bench2Drive's success; None without a record."""
        return None if self.record is None else is_success(self.record)

    @property
    def ds(self) -> float:
        """score_composed; 0 when there is no record (DS counts a missing route as 0) or no score."""
        if self.record is None or self.record.score_composed is None:
            return 0.0
        return self.record.score_composed

    @property
    def wall_game(self) -> float | None:
        return None if self.record is None else self.record.wall_game_ratio

    @property
    def abilities(self) -> tuple[str, ...]:
        return abilities_of(self.route.scenario_type)


@dataclass(frozen=True)
class Duplicate:
    route_id: str                        # the routes file's id
    sources: tuple[str, ...]             # every source holding a record of it, in order (repeats kept)
    scores: tuple[float | None, ...]     # their score_composed, parallel to sources
    kept: str                            # the source whose record counts


@dataclass(frozen=True)
class Extra:
    source: str
    route_id: str                        # the record's route_id as written


@dataclass(frozen=True)
class Merged:
    rows: tuple[RouteRow, ...]           # one per route of the routes file, in file order
    duplicates: tuple[Duplicate, ...]
    extras: tuple[Extra, ...]
    unscored: tuple[str, ...]            # recorded routes whose record has no score_composed (counted 0)
    abilities: dict[str, AbilityScore]

    @property
    def total(self) -> int:
        return len(self.rows)

    @property
    def recorded(self) -> int:
        return sum(1 for r in self.rows if r.record is not None)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(r.route.route_id for r in self.rows if r.state == "missing")

    @property
    def retired(self) -> tuple[str, ...]:
        return tuple(r.route.route_id for r in self.rows if r.retired)

    @property
    def ds(self) -> float | None:
        """Bench2Drive's driving score (0-100) over every route of the file; None for an empty file."""
        return sum(r.ds for r in self.rows) / self.total if self.rows else None

    @property
    def sr(self) -> float | None:
        """Bench2Drive's success rate (a fraction) over every route of the file."""
        return sum(1 for r in self.rows if r.success) / self.total if self.rows else None

    @property
    def ds_recorded(self) -> float | None:
        """Mean DS of the routes recorded so far (what a live run has earned per route)."""
        done = [r.ds for r in self.rows if r.record is not None]
        return sum(done) / len(done) if done else None

    @property
    def sr_recorded(self) -> float | None:
        done = [bool(r.success) for r in self.rows if r.record is not None]
        return sum(done) / len(done) if done else None


def route_key(route_id: str) -> str:
    """The routes file's id for a checkpoint route_id ("RouteScenario_1711_rep0" -> "1711").

    Repetitions other than 0 keep their full name, so they never match a route of a single-rep file.
    """
    m = _CP_ID.match(route_id)
    if m is None:
        return route_id
    return m.group(1) if m.group(2) == "0" else route_id


def merge(routes: Sequence[RouteInfo], sources: Sequence[Source], retired: Collection[str] = ()) -> Merged:
    """The merged result of `sources` over `routes` (the routes file's, in file order).

    `retired` may hold file ids ("1711") or checkpoint ids ("RouteScenario_1711_rep0").
    """
    known = {r.route_id for r in routes}
    retired_ids = {route_key(str(x)) for x in retired}
    found: dict[str, list[tuple[str, RouteRecord]]] = {}
    extras: list[Extra] = []
    for src in sources:
        for rec in src.checkpoint.records:
            if not rec.finished:
                continue  # a running route's record: no verdict yet (Bench2Drive never writes one)
            key = route_key(rec.route_id)
            if key not in known:
                extras.append(Extra(src.label, rec.route_id))
                continue
            found.setdefault(key, []).append((src.label, rec))
    rows: list[RouteRow] = []
    for route in routes:
        hits = found.get(route.route_id, [])
        rows.append(RouteRow(route=route, record=hits[0][1] if hits else None, source=hits[0][0] if hits else None,
                             retired=route.route_id in retired_ids))
    duplicates = tuple(
        Duplicate(route_id=rid, sources=tuple(h[0] for h in hits),
                  scores=tuple(h[1].score_composed for h in hits), kept=hits[0][0])
        for rid, hits in found.items() if len(hits) > 1)
    unscored = tuple(r.route.route_id for r in rows if r.record is not None and r.record.score_composed is None)
    abilities = score_abilities((r.route.scenario_type, r.success) for r in rows)
    return Merged(rows=tuple(rows), duplicates=duplicates, extras=tuple(extras), unscored=unscored,
                  abilities=abilities)
