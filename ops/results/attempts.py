"""How many times each route was run, from the supervisor's per-route failure counts.

The checkpoint keeps one record per route (a re-run overwrites it), so the attempts are the supervisor's
to tell: each failure it counted for a route (HarnessState.route_failures, keyed by route id) was one run,
and a route that now has a record was run once more. A route the supervisor never failed and that has a
record was run once; one without either has no attempt to show.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ops.results.merge import Merged, route_key


def failures_of(states: Iterable[object]) -> dict[str, int]:
    """Per routes-file id, the failures counted by the supervisors of the given harness states (summed;
    a state without `route_failures` — a harness older than the supervisor — adds nothing)."""
    out: dict[str, int] = {}
    for st in states:
        counts = getattr(st, "route_failures", None)
        if not isinstance(counts, Mapping):
            continue
        for rid, n in counts.items():
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                key = route_key(str(rid))
                out[key] = out.get(key, 0) + n
    return out


def route_attempts(merged: Merged, failures: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in merged.rows:
        rid = row.route.route_id
        n = failures.get(rid, 0) + (1 if row.record is not None else 0)
        if n:
            out[rid] = n
    return out
