"""After a hung server's stop, restart_server reads the server again until DEAD (a stopped process's
threads may hold its port a moment after its main thread is gone), within a bound; anything else refuses."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ops.actions import restart_server as rs
from ops.tristate import State


def live_reading(states: list[State]) -> SimpleNamespace:
    seen = iter(states)
    last: list[State] = []

    async def side(name, rpc=None, tables=None):
        last[:] = [next(seen, last[0] if last else State.UNKNOWN)]
        return SimpleNamespace(server=SimpleNamespace(verdict=SimpleNamespace(state=last[0])))
    return SimpleNamespace(prober=SimpleNamespace(side=side), reads=last)


def test_the_port_released_a_moment_later_reads_dead(monkeypatch) -> None:
    async def no_tables(live):
        return {}
    monkeypatch.setattr(rs, "fresh_tables", no_tables)
    live = live_reading([State.UNKNOWN, State.UNKNOWN, State.DEAD])
    snap = asyncio.run(rs.dead_after_stop(live, "A", within_s=10.0))
    assert snap.server.verdict.state is State.DEAD


def test_a_port_that_stays_taken_is_not_dead_after_the_bound(monkeypatch) -> None:
    async def no_tables(live):
        return {}
    monkeypatch.setattr(rs, "fresh_tables", no_tables)
    live = live_reading([State.UNKNOWN])
    snap = asyncio.run(rs.dead_after_stop(live, "A", within_s=0.5))
    assert snap.server.verdict.state is State.UNKNOWN
