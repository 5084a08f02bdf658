"""`results` on the real 220-route file and a real checkpoint, checked against Bench2Drive's rules
recomputed here independently (json + ElementTree, the tools' own logic restated), not through ops."""
from __future__ import annotations

import copy
import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from console.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
ROUTES = DATA / "bench2drive220.xml"
CKPT = DATA / "b2d_checkpoint_tfpp_0.json"

# tools/ability_benchmark.py (Bench2Drive 0.0.4), restated for the independent check.
B2D_ABILITY = {
    "Overtaking": ['Accident', 'AccidentTwoWays', 'ConstructionObstacle', 'ConstructionObstacleTwoWays',
                   'HazardAtSideLaneTwoWays', 'HazardAtSideLane', 'ParkedObstacleTwoWays', 'ParkedObstacle',
                   'VehicleOpensDoorTwoWays'],
    "Merging": ['CrossingBicycleFlow', 'EnterActorFlow', 'HighwayExit', 'InterurbanActorFlow', 'HighwayCutIn',
                'InterurbanAdvancedActorFlow', 'MergerIntoSlowTrafficV2', 'MergerIntoSlowTraffic',
                'NonSignalizedJunctionLeftTurn', 'NonSignalizedJunctionRightTurn',
                'NonSignalizedJunctionLeftTurnEnterFlow', 'ParkingExit', 'SequentialLaneChange',
                'SignalizedJunctionLeftTurn', 'SignalizedJunctionRightTurn', 'SignalizedJunctionLeftTurnEnterFlow'],
    "Emergency_Brake": ['BlockedIntersection', 'DynamicObjectCrossing', 'HardBreakRoute',
                        'OppositeVehicleTakingPriority', 'OppositeVehicleRunningRedLight', 'ParkingCutIn',
                        'PedestrianCrossing', 'ParkingCrossingPedestrian', 'StaticCutIn', 'VehicleTurningRoute',
                        'VehicleTurningRoutePedestrian', 'ControlLoss'],
    "Give_Way": ['InvadingTurn', 'YieldToEmergencyVehicle'],
    "Traffic_Signs": ['BlockedIntersection', 'OppositeVehicleTakingPriority', 'OppositeVehicleRunningRedLight',
                      'PedestrianCrossing', 'VehicleTurningRoute', 'VehicleTurningRoutePedestrian', 'EnterActorFlow',
                      'CrossingBicycleFlow', 'NonSignalizedJunctionLeftTurn', 'NonSignalizedJunctionRightTurn',
                      'NonSignalizedJunctionLeftTurnEnterFlow', 'SignalizedJunctionLeftTurn',
                      'SignalizedJunctionRightTurn', 'SignalizedJunctionLeftTurnEnterFlow', 'T_Junction',
                      'VanillaNonSignalizedTurn', 'VanillaSignalizedTurnEncounterGreenLight',
                      'VanillaSignalizedTurnEncounterRedLight', 'VanillaNonSignalizedTurnEncounterStopsign'],
}


def b2d_success(rd: dict) -> bool:
    if rd["status"] not in ("Completed", "Perfect"):
        return False
    return all(not v for k, v in rd["infractions"].items() if k != "min_speed_infractions")


def routes_xml() -> list[tuple[str, str, str]]:
    """(id, town, first scenario type) per route, via ElementTree."""
    root = ET.parse(ROUTES).getroot()
    return [(r.get("id"), r.get("town"), r.find("scenarios").find("scenario").get("type"))
            for r in root.findall("route")]


def expected(records: list[dict]) -> dict:
    """DS/SR over the routes file's count, missing = 0; abilities over recorded routes of each type."""
    routes = routes_xml()
    by_id: dict[str, dict] = {}
    for rd in records:
        by_id.setdefault(rd["route_id"].split("_")[1], rd)  # first record wins a duplicate
    ds = sum(rd["scores"]["score_composed"] for rid, rd in by_id.items()) / len(routes)
    sr = sum(b2d_success(rd) for rd in by_id.values()) / len(routes)
    ab = {}
    for name, types in B2D_ABILITY.items():
        rows = [by_id[rid] for rid, _town, typ in routes if typ in types and rid in by_id]
        ab[name] = sum(b2d_success(rd) for rd in rows) / len(rows) if rows else None
    missing = [rid for rid, _t, _s in routes if rid not in by_id]
    return {"ds": ds, "sr": sr, "abilities": ab, "missing": missing}


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["results", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_real_checkpoint_on_the_220_routes(capsys):
    rc, out = run_json(capsys, "--checkpoint", str(CKPT), "--routes", str(ROUTES))
    records = json.loads(CKPT.read_text())["_checkpoint"]["records"]
    exp = expected(records)
    assert rc == 1  # 192 routes missing is a finding
    assert out["total"] == 220 and out["recorded"] == 28
    assert out["ds"] == pytest.approx(exp["ds"], abs=1e-6)
    assert out["sr"] == pytest.approx(exp["sr"], abs=1e-6)
    for name, value in exp["abilities"].items():
        assert out["abilities"][name] == (None if value is None else pytest.approx(value, abs=1e-6)), name
    assert out["missing"] == exp["missing"] and len(out["missing"]) == 192
    assert out["duplicates"] == []
    # A failed Traffic_Signs route could earn map-based partial credit: the value is stated as a lower bound.
    assert out["lower_bounds"] == ["Traffic_Signs"]
    assert out["ability_detail"]["Traffic_Signs"]["lower_bound"] is True


def test_agrees_with_bench2drives_own_global_record(capsys):
    """Over its own 28 routes the file's global_record is Bench2Drive's DS and infractions per km."""
    rc, out = run_json(capsys, "--checkpoint", str(CKPT), "--routes", str(ROUTES))
    glob = json.loads(CKPT.read_text())["_checkpoint"]["global_record"]
    assert out["ds_recorded"] == pytest.approx(glob["scores_mean"]["score_composed"], abs=1e-5)
    for key in ("collisions_vehicle", "collisions_layout", "min_speed_infractions", "red_light"):
        assert out["infractions_per_km"][key] == pytest.approx(glob["infractions"][key], abs=1e-3), key


def _write(path: Path, data: dict) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_a_duplicate_is_named_and_counted_once(tmp_path, capsys):
    data = json.loads(CKPT.read_text())
    other = copy.deepcopy(data)
    recs = other["_checkpoint"]["records"][:3]
    for rd in recs:
        rd["scores"]["score_composed"] = 50.0
        rd["status"] = "Failed - Agent got blocked"
    other["_checkpoint"]["records"] = recs
    a = _write(tmp_path / "a.json", data)
    b = _write(tmp_path / "b.json", other)
    rc, out = run_json(capsys, "--checkpoint", a, b, "--routes", str(ROUTES))
    dup_ids = [rd["route_id"].split("_")[1] for rd in recs]
    assert out["duplicates"] == dup_ids
    assert all(d["kept"] == a and d["sources"] == [a, b] for d in out["duplicate_detail"])
    # Counted once, from the first source: the same numbers as the single file.
    exp = expected(data["_checkpoint"]["records"] + recs)
    assert out["recorded"] == 28
    assert out["ds"] == pytest.approx(exp["ds"], abs=1e-6)
    # Bench2Drive's merge tool would have summed all 31 records over 220.
    naive = sum(rd["scores"]["score_composed"] for rd in data["_checkpoint"]["records"] + recs) / 220
    assert out["ds"] == pytest.approx(naive - 150 / 220, abs=1e-6)


def test_retired_routes_are_named_apart_from_missing(capsys):
    rc, out = run_json(capsys, "--checkpoint", str(CKPT), "--routes", str(ROUTES),
                       "--retired", "2403", "RouteScenario_2416_rep0")
    assert out["retired"] == ["2403", "2416"]
    assert "2403" not in out["missing"] and "2416" not in out["missing"]
    assert len(out["missing"]) == 190


def test_a_record_not_in_the_routes_file_is_named_not_counted(tmp_path, capsys):
    data = json.loads(CKPT.read_text())
    data["_checkpoint"]["records"][0]["route_id"] = "RouteScenario_999999_rep0"
    f = _write(tmp_path / "c.json", data)
    rc, out = run_json(capsys, "--checkpoint", f, "--routes", str(ROUTES))
    assert out["extras"] == [{"source": f, "route_id": "RouteScenario_999999_rep0"}]
    assert out["recorded"] == 27


def test_csv_one_row_per_route(capsys):
    assert main(["results", "--checkpoint", str(CKPT), "--routes", str(ROUTES), "--csv"]) == 1
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 220
    by_id = {r["route_id"]: r for r in rows}
    assert by_id["2084"]["status"] == "Failed - TickRuntime" and by_id["2084"]["success"] == "False"
    assert by_id["1711"]["abilities"] == "Emergency_Brake" and by_id["1711"]["wall_game"] == "5.88"
    assert by_id["2403"]["state"] == "missing" and by_id["2403"]["ds"] == ""


def test_human_table_names_the_findings(capsys):
    main(["results", "--checkpoint", str(CKPT), "--routes", str(ROUTES)])
    text = capsys.readouterr().out
    assert "DS 11.387" in text and "missing (192)" in text and "lower bound" in text
    assert "Failed - TickRuntime" in text


def test_fake_success_floor(capsys):
    rc, out = run_json(capsys, "--checkpoint", str(CKPT), "--routes", str(ROUTES), "--expect-wall-game-min", "8")
    assert out["fake_success"]["flagged"] is True and out["fake_success"]["ratio"] < 8
    rc, out = run_json(capsys, "--checkpoint", str(CKPT), "--routes", str(ROUTES), "--expect-wall-game-min", "2")
    assert out["fake_success"]["flagged"] is False


def test_bad_inputs_are_all_named_without_a_traceback(tmp_path, capsys):
    broken = tmp_path / "half.json"
    broken.write_text('{"_checkpoint": {"records": [')
    rc = main(["results", "--checkpoint", str(broken), str(tmp_path / "nope.json"),
               "--routes", str(tmp_path / "none.xml"), "--json"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "half.json" in err and "nope.json" in err and "none.xml" in err
    assert "Traceback" not in err


def test_checkpoint_needs_routes(capsys):
    assert main(["results", "--checkpoint", str(CKPT)]) == 2
    assert "--routes" in capsys.readouterr().err


def test_a_folder_skips_what_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "part0.json").write_text(CKPT.read_text())
    (tmp_path / "merged.json").write_text(json.dumps({"_checkpoint": {"records": []}, "driving score": 1}))
    (tmp_path / "part0_ability.json").write_text(json.dumps({"Overtaking": 0.5}))
    rc, out = run_json(capsys, "--checkpoint", str(tmp_path), "--routes", str(ROUTES))
    assert out["sources"] == [str(tmp_path / "part0.json")] and out["recorded"] == 28
    assert sorted(s.split(":")[0] for s in out["skipped"]) == sorted(
        [str(tmp_path / "merged.json"), str(tmp_path / "part0_ability.json")])
