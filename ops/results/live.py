"""Live results of a side for status and the pane: ETA by town, DS/SR so far, the fake-success check.

Recomputed only when the side's checkpoint changed (once a route), never per poll: the checkpoint cache
hands back the same parsed object while the file is unchanged, and the routes file is re-read then only
if its size or mtime moved. A checkpoint caught half-written keeps the last answer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.model import SideConfig
from ops.parse.checkpoint import Checkpoint, is_success
from ops.parse.errors import ParseError
from ops.parse.routes import MAX_CHARS as ROUTES_MAX
from ops.platform.base import Host
from ops.platform.files import read_text, stat_file
from ops.results.eta import Eta, estimate
from ops.results.fake_success import FakeSuccess, check
from ops.results.routes_xml import RoutesTable, parse_routes_table


@dataclass(frozen=True)
class LiveResults:
    eta: Eta | None                  # None: the routes file could not be read
    recorded: int
    ds_so_far: float | None          # mean score_composed of the finished routes
    sr_so_far: float | None
    fake: FakeSuccess
    routes_error: str | None = None

    def to_json(self) -> dict:
        eta = self.eta
        return {"eta_s": None if eta is None or eta.eta_s is None else round(eta.eta_s, 1),
                "eta_routes": None if eta is None else eta.rests_on,
                "eta_left": None if eta is None else eta.routes_left,
                "eta_prior_towns": [] if eta is None else list(eta.prior_towns),
                "recorded": self.recorded,
                "ds_so_far": None if self.ds_so_far is None else round(self.ds_so_far, 3),
                "sr_so_far": None if self.sr_so_far is None else round(self.sr_so_far, 4),
                "fake_success": self.fake.to_json(), "routes_error": self.routes_error}


def summarise(routes: RoutesTable | None, cp: Checkpoint | None, floor: float | None,
              routes_error: str | None = None) -> LiveResults:
    records = [r for r in (cp.records if cp else ()) if r.finished]
    ds = [r.score_composed or 0.0 for r in records]
    return LiveResults(
        eta=estimate(routes.routes, records) if routes is not None else None, recorded=len(records),
        ds_so_far=sum(ds) / len(ds) if ds else None,
        sr_so_far=sum(is_success(r) for r in records) / len(records) if records else None,
        fake=check(records, floor), routes_error=routes_error)


class LiveResultsCache:
    def __init__(self) -> None:
        self._routes: dict[str, tuple[tuple[float | None, int | None], RoutesTable]] = {}
        self._last: dict[str, tuple[object, LiveResults]] = {}

    async def get(self, host: Host, side: SideConfig, cp: Checkpoint | None, cp_missing: bool,
                  timeout: float) -> LiveResults | None:
        """None only before anything could be computed (a half-written checkpoint on the first poll)."""
        key = cp if cp is not None else ("missing" if cp_missing else None)
        last = self._last.get(side.name)
        if key is None:
            return last[1] if last else None
        if last is not None and last[0] is key:
            return last[1]
        routes, err = await self._routes_table(host, side, timeout)
        value = summarise(routes, cp, side_floor(side), err)
        self._last[side.name] = (key, value)
        return value

    async def _routes_table(self, host: Host, side: SideConfig, timeout: float) -> tuple[RoutesTable | None, str | None]:
        path = side.evaluator.path(side.evaluator.routes)
        cache_key = f"{host.name}:{path}"
        st = await stat_file(host, path, timeout)
        if st.error or not st.exists:
            return None, st.error or f"{path}: no such file"
        hit = self._routes.get(cache_key)
        if hit is not None and hit[0] == (st.mtime, st.size):
            return hit[1], None
        ft = await read_text(host, path, timeout, limit=ROUTES_MAX)
        if ft.text is None:
            return None, ft.error or f"{path}: no such file"
        table = parse_routes_table(ft.text.encode("utf-8"))
        if isinstance(table, ParseError):
            return None, f"{path}: {table.reason}"
        self._routes[cache_key] = ((st.mtime, st.size), table)
        return table, None


def side_floor(side: SideConfig) -> float | None:
    """The side's `expect_wall_game_min` (config), None when not set."""
    return side.expect_wall_game_min
