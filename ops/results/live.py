"""Live results of a side for status and the pane: ETA by town, DS/SR so far, the fake-success check.

Recomputed only when the side's checkpoint changed (once a route), never per poll: the checkpoint cache
hands back the same parsed object while the file is unchanged, and the routes file is re-read then only
if its size or mtime moved. A checkpoint caught half-written keeps the last answer.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ops.model import SideConfig
from ops.parse.checkpoint import Checkpoint, is_success
from ops.parse.errors import ParseError
from ops.parse.routes import MAX_CHARS as ROUTES_MAX
from ops.platform.base import Host
from ops.platform.files import read_text, stat_file
from ops.results.eta import Eta, estimate, rig_eta
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
    routes: RoutesTable | None = None    # the side's routes file, for the results screen (not in JSON)

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
              routes_error: str | None = None, retired: tuple[str, ...] = ()) -> LiveResults:
    records = [r for r in (cp.records if cp else ()) if r.finished]
    ds = [r.score_composed or 0.0 for r in records]
    return LiveResults(
        eta=estimate(routes.routes, records, retired) if routes is not None else None, recorded=len(records),
        ds_so_far=sum(ds) / len(ds) if ds else None,
        sr_so_far=sum(is_success(r) for r in records) / len(records) if records else None,
        fake=check(records, floor), routes_error=routes_error, routes=routes)


class LiveResultsCache:
    def __init__(self, on_fake_success: Callable[[str, FakeSuccess], None] | None = None) -> None:
        self._routes: dict[str, tuple[tuple[float | None, int | None], RoutesTable]] = {}
        self._last: dict[str, tuple[object, tuple[str, ...], LiveResults]] = {}
        # Called once when a side becomes flagged (not on every poll while it stays flagged): the hook a
        # notifier plugs into (see fake_success.event_fields). A failing hook never fails a poll.
        self.on_fake_success = on_fake_success
        self._flagged: set[str] = set()
        self.hook_error: str | None = None    # the last failure of on_fake_success, kept as evidence

    async def get(self, host: Host, side: SideConfig, cp: Checkpoint | None, cp_missing: bool,
                  timeout: float, retired: tuple[str, ...] = (), within_s: float = 0.0) -> LiveResults | None:
        """None only before anything could be computed (a half-written checkpoint on the first poll).
        retired: the route ids the side's supervisor retired (left out of the ETA). within_s: as the
        platform's stat_file (the routes file's stat on a display's beat)."""
        key = cp if cp is not None else ("missing" if cp_missing else None)
        last = self._last.get(side.name)
        if key is None:
            return last[2] if last else None
        if last is not None and last[0] is key and last[1] == retired:
            return last[2]
        routes, err = await self._routes_table(host, side, timeout, within_s)
        value = summarise(routes, cp, side_floor(side), err, retired)
        self._last[side.name] = (key, retired, value)
        self._alarm(side.name, value.fake)
        return value

    def _alarm(self, side: str, fake: FakeSuccess) -> None:
        if not fake.flagged:
            self._flagged.discard(side)
            return
        if side in self._flagged:
            return
        self._flagged.add(side)
        if self.on_fake_success is not None:
            try:
                self.on_fake_success(side, fake)
            except Exception as e:  # noqa: BLE001 - a notifier's failure must not stop the side's poll
                self.hook_error = f"on_fake_success({side}): {type(e).__name__}: {e}"

    async def _routes_table(self, host: Host, side: SideConfig, timeout: float,
                            within_s: float) -> tuple[RoutesTable | None, str | None]:
        path = side.evaluator.path(side.evaluator.routes)
        cache_key = f"{host.name}:{path}"
        st = await stat_file(host, path, timeout, within_s)
        if st.error or not st.exists:
            return None, st.error or f"{path}: no such file"
        hit = self._routes.get(cache_key)
        if hit is not None and hit[0] == (st.mtime, st.size):
            return hit[1], None
        ft = await read_text(host, path, timeout, limit=ROUTES_MAX)
        if ft.text is None:
            return None, ft.error or f"{path}: no such file"
        # A parse of the 220 routes takes ~0.1 s of Python callbacks: in a thread, so the UI's loop keeps
        # drawing (the GIL is handed over every few ms); bounded like every other read of the poll.
        try:
            table = await asyncio.wait_for(asyncio.to_thread(parse_routes_table, ft.text.encode("utf-8")), timeout)
        except asyncio.TimeoutError:
            return None, f"{path}: parsing took longer than {timeout} s"
        if isinstance(table, ParseError):
            return None, f"{path}: {table.reason}"
        self._routes[cache_key] = ((st.mtime, st.size), table)
        return table, None


def side_floor(side: SideConfig) -> float | None:
    """The side's `expect_wall_game_min` (config), None when not set."""
    return side.expect_wall_game_min


def hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def pane_line(live: LiveResults) -> str:
    """One line for a side's pane and status: DS/SR so far and the ETA with what it rests on."""
    parts = []
    if live.ds_so_far is not None and live.sr_so_far is not None:
        parts.append(f"DS {live.ds_so_far:.1f} SR {100 * live.sr_so_far:.0f}% so far ({live.recorded})")
    eta = live.eta
    if eta is None:
        parts.append("ETA ? (routes file unreadable)")
    elif eta.routes_left == 0:
        parts.append("ETA done")
    elif eta.eta_s is not None:
        basis = f"on {eta.rests_on} routes" if eta.rests_on else "prior only"
        if eta.prior_towns and eta.rests_on:
            basis += f", prior for {len(eta.prior_towns)} towns"
        parts.append(f"ETA {hours(eta.eta_s)} ({basis})")
    if live.fake.flagged:
        parts.append(f"FAKE? w/g {live.fake.ratio:.1f}x < {live.fake.floor:g}x")
    return " · ".join(parts)


def rig_eta_json(snaps: Mapping[str, Any]) -> dict:
    """The rig's ETA from its sides' snapshots (objects with a `results` LiveResults or None)."""
    etas = [s.results.eta if s.results is not None else None for s in snaps.values()]
    if not etas or any(e is None for e in etas):
        return {"eta_s": None, "routes_left": None, "rests_on": None}
    rig = rig_eta([e for e in etas if e is not None])
    return {"eta_s": None if rig.eta_s is None else round(rig.eta_s, 1), "routes_left": rig.routes_left,
            "rests_on": rig.rests_on}
