"""Time left for a side and a rig, stratified by town.

A naive mean × routes left is badly wrong on Bench2Drive: the large-map towns take ten times longer and
are not spread evenly through the routes file (the field notes needed a per-town estimator to get 63.7 h
right). Each route left is estimated by the mean wall time (duration_system) of the done routes of its
town; a town with none yet falls back to the prior (ops/results/walltime.py), scaled to what was seen.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ops.parse.checkpoint import RouteRecord
from ops.results.merge import route_key
from ops.results.routes_xml import RouteInfo
from ops.results.walltime import TownWall


@dataclass(frozen=True)
class Eta:
    eta_s: float | None             # None: cannot estimate (routes file unreadable)
    routes_left: int
    rests_on: int                   # done routes whose wall time the estimate uses
    prior_towns: tuple[str, ...] = ()   # towns of routes left that were estimated from the prior

    def to_json(self) -> dict:
        return {"eta_s": None if self.eta_s is None else round(self.eta_s, 1), "routes_left": self.routes_left,
                "rests_on": self.rests_on, "prior_towns": list(self.prior_towns)}


def town_wall(routes: Sequence[RouteInfo], records: Iterable[RouteRecord]) -> TownWall:
    """Observed wall times by town from finished records (the town from the record, else the routes file)."""
    by_id = {r.route_id: r for r in routes}
    samples = []
    for rec in records:
        if not rec.finished or rec.duration_system is None:
            continue
        info = by_id.get(route_key(rec.route_id))
        town = rec.town_name or (info.town if info else None)
        if town is None:
            continue
        length = rec.route_length if rec.route_length is not None else (info.length_m if info else 0.0)
        samples.append((town, length, rec.duration_system))
    return TownWall.from_samples(samples)


def estimate(routes: Sequence[RouteInfo], records: Iterable[RouteRecord], retired: Iterable[str] = ()) -> Eta:
    """ETA of one side: every route of its routes file without a finished record, by its town's mean.
    Routes the supervisor retired will not be run again: they cost nothing."""
    recs = list(records)
    done = {route_key(r.route_id) for r in recs if r.finished} | {route_key(str(r)) for r in retired}
    model = town_wall(routes, recs)
    left = [r for r in routes if r.route_id not in done]
    eta = sum(model.expected_s(r.town, r.length_m) for r in left)
    prior = tuple(sorted({r.town for r in left if model.from_prior(r.town)}))
    return Eta(eta_s=eta, routes_left=len(left), rests_on=model.samples, prior_towns=prior)


def rig_eta(sides: Iterable[Eta]) -> Eta:
    """Sides run in parallel: the rig is done when its slowest side is; unknown if any side is unknown."""
    etas = list(sides)
    if not etas or any(e.eta_s is None for e in etas):
        return Eta(None, sum(e.routes_left for e in etas), sum(e.rests_on for e in etas))
    return Eta(eta_s=max(e.eta_s or 0.0 for e in etas), routes_left=sum(e.routes_left for e in etas),
               rests_on=sum(e.rests_on for e in etas),
               prior_towns=tuple(sorted({t for e in etas for t in e.prior_towns})))
