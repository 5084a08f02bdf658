"""Split a routes file into N parts balanced by expected wall time, and draw a stratified sample.

Bench2Drive's tools/split_xml.py cuts contiguous chunks; on the 220 routes its parts differ a lot in
route length and more in time, because the large-map towns cluster. Here routes are dealt longest-first
to the part with the least expected time so far (LPT: within 4/3 of optimal, and on hundreds of routes
in practice within a few percent), then each part keeps the file's order. A part's file is the original
head (declaration, <routes ...>), the route elements byte-for-byte, and the original tail.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ops.results.routes_xml import RouteInfo, RoutesTable


@dataclass(frozen=True)
class Part:
    routes: tuple[RouteInfo, ...]   # in routes-file order
    expected_s: float


def balance(routes: Sequence[RouteInfo], parts: int, expected: Callable[[RouteInfo], float]) -> tuple[Part, ...]:
    """Every route in exactly one of `parts` parts, greedy longest-processing-time first."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    order = {id(r): i for i, r in enumerate(routes)}
    costs = [(expected(r), i, r) for i, r in enumerate(routes)]
    costs.sort(key=lambda c: (-c[0], c[1]))  # ties: file order, so the result is deterministic
    heap = [(0.0, k) for k in range(parts)]
    bins: list[list[RouteInfo]] = [[] for _ in range(parts)]
    totals = [0.0] * parts
    for cost, _i, route in costs:
        load, k = heapq.heappop(heap)
        bins[k].append(route)
        totals[k] = load + cost
        heapq.heappush(heap, (totals[k], k))
    return tuple(Part(routes=tuple(sorted(b, key=lambda r: order[id(r)])), expected_s=totals[k])
                 for k, b in enumerate(bins))


def spread(parts: Sequence[Part]) -> float:
    """(max - min) / max of the parts' expected times; 0 for one part or all empty."""
    times = [p.expected_s for p in parts]
    return (max(times) - min(times)) / max(times) if times and max(times) > 0 else 0.0


def allocate(counts: dict[str, int], k: int) -> dict[str, int]:
    """Sample sizes per stratum: proportional (largest remainder), every stratum >= 1 where k allows.

    A stratum whose proportional share is below one route is given one, and the rest is re-apportioned
    among the others, until no share falls below one (so the big strata stay proportional among
    themselves). With k below the number of strata the biggest strata get one each.
    """
    total = sum(counts.values())
    k = max(0, min(k, total))
    if k == 0:
        return dict.fromkeys(counts, 0)
    strata = sorted(counts, key=lambda s: (-counts[s], s))
    if k < len(strata):
        return {s: int(i < k) for i, s in enumerate(strata)}
    fixed: dict[str, int] = {}
    while True:
        free = [s for s in strata if s not in fixed]
        left = k - sum(fixed.values())
        pool = sum(counts[s] for s in free)
        quota = {s: left * counts[s] / pool for s in free}
        small = [s for s in free if quota[s] < 1]
        if not small:
            break
        for s in small:
            fixed[s] = 1
    alloc = {s: min(counts[s], math.floor(q)) for s, q in quota.items()}
    rest = left - sum(alloc.values())
    for s in sorted(free, key=lambda s: (-(quota[s] - math.floor(quota[s])), -counts[s], s)):
        if rest <= 0:
            break
        if alloc[s] < counts[s]:
            alloc[s] += 1
            rest -= 1
    alloc.update(fixed)
    return {s: alloc[s] for s in counts}


def sample(table: RoutesTable, k: int) -> tuple[RouteInfo, ...]:
    """A stratified-by-town subset of k routes: evenly spaced within each town, in file order."""
    by_town: dict[str, list[RouteInfo]] = {}
    for r in table.routes:
        by_town.setdefault(r.town, []).append(r)
    sizes = allocate({t: len(v) for t, v in by_town.items()}, k)
    picked: set[int] = set()
    for town, routes in by_town.items():
        n = sizes[town]
        for j in range(n):
            picked.add(id(routes[math.floor((j + 0.5) * len(routes) / n)]))
    return tuple(r for r in table.routes if id(r) in picked)


def part_bytes(table: RoutesTable, routes: Sequence[RouteInfo]) -> bytes:
    """A routes file holding `routes`, each element exactly as in the original."""
    sep = table.separator
    return table.head + sep.join(table.element(r) for r in routes) + table.tail
