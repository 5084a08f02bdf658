"""Infractions per driven kilometre, as Bench2Drive's statistics_manager.compute_global_statistics does.

Kilometres driven = Σ route_length/1000 × score_route/100 over the records (at least 0.001 km); each
infraction kind is its event count over that. One difference, stated: Bench2Drive reports
outside_route_lanes as the kilometres driven off-lane (parsed from the message text), not per km; here it
is events per km like the rest, since the parsed record keeps the count and share, not the metres.
"""
from __future__ import annotations

from collections.abc import Iterable

from ops.parse.checkpoint import RouteRecord

MIN_KM = 0.001  # Bench2Drive's floor: never divide by zero driven distance

INFRACTION_KINDS: tuple[str, ...] = (
    "collisions_pedestrian", "collisions_vehicle", "collisions_layout", "red_light", "stop_infraction",
    "outside_route_lanes", "route_dev", "route_timeout", "vehicle_blocked",
    "yield_emergency_vehicle_infractions", "scenario_timeouts", "min_speed_infractions")


def km_driven(records: Iterable[RouteRecord]) -> float | None:
    """None when a record lacks its length or route score (the sum would be a guess)."""
    km = 0.0
    for rec in records:
        if rec.route_length is None or rec.score_route is None:
            return None
        km += rec.route_length / 1000.0 * rec.score_route / 100.0
    return max(km, MIN_KM)


def infractions_per_km(records: Iterable[RouteRecord]) -> dict[str, float] | None:
    recs = list(records)
    km = km_driven(recs)
    if km is None:
        return None
    kinds = list(INFRACTION_KINDS) + sorted({k for r in recs for k in r.infractions} - set(INFRACTION_KINDS))
    return {k: sum(r.infractions.get(k, 0) for r in recs) / km for k in kinds}
