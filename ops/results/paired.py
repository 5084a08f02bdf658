"""Paired per-route comparison of two runs: ΔDS on the routes both recorded, its spread, and the MDE.

MDE = (z_0.975 + z_0.8) · σ_d / √n (two-sided α = 0.05, power 0.8), σ_d the sample standard deviation of
the per-route differences. A mean difference is called significant only when |mean Δ| exceeds the MDE;
otherwise it is "within MDE" (not shown to differ — which is not "shown equal"). Closed-loop noise is
two-peaked (a few routes flip between stuck and completed, the rest move a little), so the flips are
listed first: they are what a mean hides.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from ops.parse.checkpoint import RouteRecord

ALPHA = 0.05
POWER = 0.8
Z_ALPHA = NormalDist().inv_cdf(1 - ALPHA / 2)   # 1.959964
Z_POWER = NormalDist().inv_cdf(POWER)           # 0.841621
REACHED = ("Completed", "Perfect")


@dataclass(frozen=True)
class PairedRoute:
    route_id: str
    status_a: str
    status_b: str
    ds_a: float
    ds_b: float

    @property
    def delta(self) -> float:
        return self.ds_b - self.ds_a

    @property
    def flip(self) -> bool:
        """Completed in one run and failed in the other."""
        return (self.status_a in REACHED) != (self.status_b in REACHED)


@dataclass(frozen=True)
class Comparison:
    routes: tuple[PairedRoute, ...]   # flips first, then by |Δ| descending, then by route id
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.routes)

    @property
    def mean_delta(self) -> float | None:
        return sum(r.delta for r in self.routes) / self.n if self.routes else None

    @property
    def sd_delta(self) -> float | None:
        """Sample standard deviation (n - 1); None below two pairs."""
        if self.n < 2:
            return None
        mean = self.mean_delta or 0.0
        return math.sqrt(sum((r.delta - mean) ** 2 for r in self.routes) / (self.n - 1))

    @property
    def mde(self) -> float | None:
        sd = self.sd_delta
        return None if sd is None else (Z_ALPHA + Z_POWER) * sd / math.sqrt(self.n)

    @property
    def significant(self) -> bool:
        mean, mde = self.mean_delta, self.mde
        return mean is not None and mde is not None and abs(mean) > mde

    @property
    def verdict(self) -> str:
        if self.mde is None:
            return f"too few shared routes (n={self.n}; need 2)"
        return "significant" if self.significant else "within MDE"

    @property
    def flips(self) -> tuple[PairedRoute, ...]:
        return tuple(r for r in self.routes if r.flip)


def compare(a: Mapping[str, RouteRecord], b: Mapping[str, RouteRecord]) -> Comparison:
    """Pair two runs' records by route id (each run already de-duplicated: one record per id)."""
    shared = sorted(set(a) & set(b))
    pairs = [PairedRoute(rid, a[rid].status, b[rid].status, a[rid].score_composed or 0.0,
                         b[rid].score_composed or 0.0) for rid in shared]
    pairs.sort(key=lambda p: (not p.flip, -abs(p.delta), _id_order(p.route_id)))
    return Comparison(routes=tuple(pairs), only_a=tuple(sorted(set(a) - set(b), key=_id_order)),
                      only_b=tuple(sorted(set(b) - set(a), key=_id_order)))


def _id_order(route_id: str) -> tuple[int, str]:
    return (int(route_id), "") if route_id.isdigit() else (1 << 62, route_id)
