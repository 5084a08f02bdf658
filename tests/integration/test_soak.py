"""The short, deterministic version of bench/soak.py (issue 15): two sides of 10 routes, one fault of each
evaluator/server kind (seeded), one route that always crashes; nobody touches it. Every route ends with a
record or retired; nothing lost; no bystander touched; every fault recovered; notifications received by a
real HTTP endpoint. The figures (MTTR) are printed, never asserted."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import soak


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


@pytest.mark.timeout(600)   # its own bound is timeout_s=400; recoveries take longer on a loaded machine
def test_short_unattended_soak(tmp_path: Path) -> None:
    res = soak(tmp_path / "sim", routes=10, n_faults=5, seed=7, route_s=0.8, gap_s=(1.0, 3.0), timeout_s=400,
               kinds=("hang", "crash", "server-crash", "server-hang", "agent-setup"))
    print(res.line())
    assert res.statuses == {"A": "finished", "B": "finished"}, res
    assert not res.missing and res.lost == 0 and res.touched == 0, res
    # The route that always crashes is retired; a random fault landing twice on one route may retire it too.
    assert res.crash_route in res.retired, (res.crash_route, res.retired)
    # A fault lands only on a side still running: a side that finished first leaves the rest of the plan unused.
    assert len(res.faults) >= 3 and res.recovered == len(res.faults), res.faults
    assert res.audit_ops.get("stop-chain", 0) >= 1 and res.audit_ops.get("retire-route") == len(res.retired), res.audit_ops
    assert res.notifications > 0 and {"stalled", "route-retired", "finished"} <= set(res.kinds_seen), res.kinds_seen
