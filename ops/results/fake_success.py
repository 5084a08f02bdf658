"""The fake-success alarm: a run whose wall/game ratio is below what its model can do is not inferring.

A model's per-frame cost fixes a floor on wall time per simulated second (SimLingo ~10x, AutoMoT 1.4-5.8x,
the autopilot below 1x). A "success" at ~1x from a model that needs 10x means the results came from
somewhere else (a cache, a stub agent, a wrong checkpoint). The floor is the side's config
`expect_wall_game_min`; without one there is no alarm.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ops.parse.checkpoint import RouteRecord

EVENT_KIND = "fake-success"   # the supervisor's event kinds are hyphenated (route-retired, gave-up)


@dataclass(frozen=True)
class FakeSuccess:
    floor: float | None              # expect_wall_game_min; None: not configured
    ratio: float | None              # Σ wall / Σ game over the finished records
    routes_below: tuple[str, ...]    # route ids whose own ratio is below the floor

    @property
    def flagged(self) -> bool:
        return self.floor is not None and self.ratio is not None and self.ratio < self.floor

    @property
    def message(self) -> str:
        if not self.flagged:
            return ""
        return (f"wall/game {self.ratio:.2f}x is below this model's floor {self.floor:g}x: "
                "the model may not really be inferring (fake success)")

    def to_json(self) -> dict:
        return {"floor": self.floor, "ratio": None if self.ratio is None else round(self.ratio, 3),
                "flagged": self.flagged, "routes_below": list(self.routes_below), "message": self.message}


def check(records: Iterable[RouteRecord], floor: float | None) -> FakeSuccess:
    walls = games = 0.0
    below: list[str] = []
    for rec in records:
        if not rec.finished or rec.duration_system is None or rec.duration_game is None:
            continue
        walls += rec.duration_system
        games += rec.duration_game
        ratio = rec.wall_game_ratio
        if floor is not None and ratio is not None and ratio < floor:
            below.append(rec.route_id)
    return FakeSuccess(floor=floor, ratio=walls / games if games > 0 else None, routes_below=tuple(below))


def event_fields(side: str, fake: FakeSuccess) -> dict[str, str]:
    """The fields of the notification for a flagged side, in the shape of ops/notify.py's NotifyEvent(kind,
    side, title, body). HOOK: the process that owns a Notifier and a Prober (the supervisor, which polls its
    side through live.prober) sets, once,
    `live.prober.live_results.on_fake_success = lambda side, fake: harness.event(EVENT_KIND, fake.message)`
    (or `notifier.send(NotifyEvent(**event_fields(side, fake)))`); the cache calls it once per transition
    into the flagged state."""
    return {"kind": EVENT_KIND, "side": side, "title": f"{side}: fake success?", "body": fake.message}
