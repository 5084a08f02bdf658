"""Expected wall time of a route: the mean of done routes of its town, else a prior.

Wall time is dominated by the town, not the route length: Bench2Drive's routes are all ~50-220 m, yet
the field notes measured 35-80 min per route on the large maps (Town12, Town13: tiled LargeMaps, streamed
around the ego) against a few minutes on the small towns, with a ~10x wall/game model. The prior is
`(SETUP_S + length_m * S_PER_M) * TOWN_FACTOR[town]`; only its ratios matter for balancing a split, and
where some towns have data the prior of the others is scaled by the observed/prior ratio of those.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SETUP_S = 60.0        # load the scenario, spawn, warm the agent
S_PER_M = 1.5         # ~100 m in ~2.5 min on a small town at a ~10x wall/game model
LARGE_MAP_FACTOR = 12.0
TOWN_FACTOR: Mapping[str, float] = {"Town12": LARGE_MAP_FACTOR, "Town13": LARGE_MAP_FACTOR}


def prior_s(town: str, length_m: float) -> float:
    return (SETUP_S + max(length_m, 0.0) * S_PER_M) * TOWN_FACTOR.get(town, 1.0)


@dataclass(frozen=True)
class TownWall:
    """Observed wall times (duration_system, s) of done routes, by town, and a prior for the rest."""
    observed: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # The observed/prior ratio over the done routes (1.0 with none): calibrates the prior's scale.
    scale: float = 1.0

    @classmethod
    def from_samples(cls, samples: Iterable[tuple[str, float, float]]) -> TownWall:
        """From (town, length_m, wall_s) of done routes; wall_s <= 0 is not a measurement."""
        by_town: dict[str, list[float]] = {}
        seen_s = prior_sum = 0.0
        for town, length_m, wall_s in samples:
            if wall_s is None or wall_s <= 0:
                continue
            by_town.setdefault(town, []).append(wall_s)
            seen_s += wall_s
            prior_sum += prior_s(town, length_m)
        scale = seen_s / prior_sum if prior_sum > 0 else 1.0
        return cls(observed={t: tuple(v) for t, v in by_town.items()}, scale=scale)

    @property
    def samples(self) -> int:
        return sum(len(v) for v in self.observed.values())

    def mean(self, town: str) -> float | None:
        walls = self.observed.get(town)
        return sum(walls) / len(walls) if walls else None

    def expected_s(self, town: str, length_m: float) -> float:
        seen = self.mean(town)
        return seen if seen is not None else prior_s(town, length_m) * self.scale

    def from_prior(self, town: str) -> bool:
        return town not in self.observed
