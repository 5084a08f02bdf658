"""ETA stratified by town, the prior for unseen towns, and the live summary of a side."""
from __future__ import annotations

import asyncio

import pytest

from ops.parse.checkpoint import RouteRecord
from ops.results.eta import Eta, estimate, rig_eta
from ops.results.live import summarise
from ops.results.routes_xml import RouteInfo, RoutesTable
from ops.results.walltime import prior_s


def route(rid: str, town: str, length: float = 100.0) -> RouteInfo:
    return RouteInfo(route_id=rid, town=town, scenario_type="ParkingExit", length_m=length, start=0, end=0)


def record(rid: str, town: str, wall: float, game: float = 10.0, status: str = "Completed",
           ds: float = 100.0) -> RouteRecord:
    return RouteRecord(index=0, route_id=f"RouteScenario_{rid}_rep0", status=status, score_composed=ds,
                       score_route=100.0, score_penalty=1.0, duration_system=wall, duration_game=game,
                       route_length=100.0, town_name=town)


ROUTES = [route("1", "Town12"), route("2", "Town12"), route("3", "Town01"), route("4", "Town12"),
          route("5", "Town01"), route("6", "Town05", 50.0)]


def test_each_route_left_costs_its_towns_mean():
    done = [record("1", "Town12", 3000.0), record("2", "Town12", 2000.0), record("3", "Town01", 100.0)]
    eta = estimate(ROUTES, done)
    # Left: 4 (Town12, mean 2500), 5 (Town01, mean 100), 6 (Town05: unseen, the prior scaled to the data).
    scale = (3000 + 2000 + 100) / (2 * prior_s("Town12", 100.0) + prior_s("Town01", 100.0))
    assert eta.routes_left == 3 and eta.rests_on == 3 and eta.prior_towns == ("Town05",)
    assert eta.eta_s == pytest.approx(2500 + 100 + prior_s("Town05", 50.0) * scale)
    # A naive mean x routes left would say 3 * 1700 = 5100 s: the town mix matters.
    assert eta.eta_s != pytest.approx(5100)


def test_no_data_yet_is_all_prior():
    eta = estimate(ROUTES, [])
    assert eta.rests_on == 0 and eta.routes_left == 6
    assert eta.eta_s == pytest.approx(sum(prior_s(r.town, r.length_m) for r in ROUTES))
    # The large maps dominate, as the field notes measured.
    assert prior_s("Town12", 100.0) > 5 * prior_s("Town01", 100.0)


def test_rig_eta_is_the_slowest_side_and_unknown_stays_unknown():
    a, b = Eta(100.0, 2, 3), Eta(500.0, 1, 4)
    assert rig_eta([a, b]).eta_s == 500.0 and rig_eta([a, b]).routes_left == 3
    assert rig_eta([a, Eta(None, 5, 0)]).eta_s is None


def test_live_summary_so_far_and_fake_success():
    table = RoutesTable(routes=tuple(ROUTES), data=b"")
    recs = [record("1", "Town12", 30.0, 20.0), record("3", "Town01", 20.0, 20.0, status="Failed", ds=40.0)]
    live = summarise(table, _cp(recs), floor=5.0)
    assert live.recorded == 2 and live.ds_so_far == pytest.approx(70.0) and live.sr_so_far == pytest.approx(0.5)
    assert live.fake.flagged and live.fake.ratio == pytest.approx(50 / 40)
    assert live.fake.routes_below == ("RouteScenario_1_rep0", "RouteScenario_3_rep0")
    j = live.to_json()
    assert j["eta_routes"] == 2 and j["eta_left"] == 4 and j["fake_success"]["flagged"] is True
    assert summarise(table, _cp(recs), floor=None).fake.flagged is False


def _cp(records):
    from ops.parse.checkpoint import Checkpoint
    return Checkpoint(progress=(len(records), 6), records=tuple(records), entry_status="Started")


def test_fake_success_hook_fires_once_per_transition(tmp_path):
    asyncio.run(_hook_case(tmp_path))


async def _hook_case(tmp_path) -> None:
    import json
    from pathlib import Path

    from ops.config import parse_config
    from ops.parse.checkpoint import parse_checkpoint
    from ops.platform.local import LocalHost
    from ops.results.fake_success import event_fields
    from ops.results.live import LiveResultsCache

    data = Path(__file__).resolve().parents[1] / "data"
    (tmp_path / "r.xml").write_bytes((data / "bench2drive220.xml").read_bytes())
    rig = parse_config(f"""\
version: 1
hosts:
  here: {{type: local, os: linux}}
sides:
  a:
    server: {{host: here, command: [CarlaUE4.sh], rpc_port: 2000}}
    evaluator: {{host: here, conda_env: env, cwd: {tmp_path}, script: e.py, routes: r.xml, checkpoint: c.json,
                log: l.log}}
    expect_wall_game_min: 8
""", "rig.yaml")
    raw = (data / "b2d_checkpoint_tfpp_0.json").read_text()
    fired: list[dict] = []
    cache = LiveResultsCache(on_fake_success=lambda side, fake: fired.append(event_fields(side, fake)))
    host = LocalHost("here", "linux")
    side = rig.sides["a"]
    first = await cache.get(host, side, parse_checkpoint(raw), False, 5.0)
    again = await cache.get(host, side, parse_checkpoint(raw), False, 5.0)   # a new route, still flagged
    assert first is not None and first.fake.flagged and again is not None and again.fake.flagged
    assert first.eta is not None and first.eta.routes_left == 192
    assert len(fired) == 1 and fired[0]["kind"] == "fake-success" and fired[0]["side"] == "a"
    assert "below this model's floor 8x" in fired[0]["body"]
    slow = json.loads(raw)
    for rec in slow["_checkpoint"]["records"]:
        rec["meta"]["duration_system"] = rec["meta"]["duration_game"] * 20
    assert not (await cache.get(host, side, parse_checkpoint(json.dumps(slow)), False, 5.0)).fake.flagged
    await cache.get(host, side, parse_checkpoint(raw), False, 5.0)
    assert len(fired) == 2


def test_retired_routes_cost_nothing():
    done = [record("1", "Town12", 3000.0)]
    with_all = estimate(ROUTES, done)
    retired = estimate(ROUTES, done, retired=["RouteScenario_2_rep0", "4"])
    assert retired.routes_left == with_all.routes_left - 2
    assert retired.eta_s == pytest.approx(with_all.eta_s - 2 * 3000.0)
