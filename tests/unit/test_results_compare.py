"""`compare` against a hand-computed case."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli.main import main


def checkpoint(rows: list[tuple[str, str, float]]) -> dict:
    return {"_checkpoint": {"global_record": {}, "progress": [len(rows), len(rows)], "records": [
        {"index": i, "route_id": f"RouteScenario_{rid}_rep0", "status": status, "infractions": {},
         "scores": {"score_route": 100.0, "score_penalty": 1.0, "score_composed": ds},
         "meta": {"route_length": 100.0, "duration_game": 10.0, "duration_system": 60.0}}
        for i, (rid, status, ds) in enumerate(rows)]}, "entry_status": "Finished"}


def test_hand_computed(tmp_path: Path, capsys):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    # Shared routes 1-4; route 5 only in A, route 6 only in B (not paired).
    a.write_text(json.dumps(checkpoint([("1", "Completed", 80.0), ("2", "Completed", 100.0),
                                        ("3", "Failed - Agent got blocked", 20.0), ("4", "Perfect", 100.0),
                                        ("5", "Completed", 100.0)])))
    b.write_text(json.dumps(checkpoint([("1", "Completed", 90.0), ("2", "Failed - Agent timed out", 80.0),
                                        ("3", "Completed", 50.0), ("4", "Perfect", 100.0),
                                        ("6", "Completed", 100.0)])))
    report = tmp_path / "r.html"
    assert main(["compare", str(a), str(b), "--json", "--report", str(report)]) == 0
    out = json.loads(capsys.readouterr().out)
    # Δ = 10, -20, 30, 0: mean 5; deviations 5, -25, 25, -5: Σ² = 1300; σ_d = √(1300/3) = 20.81666
    # MDE = (1.959964 + 0.841621) · 20.81666 / √4 = 2.801585 · 10.40833 = 29.15980
    assert out["n"] == 4
    assert out["mean_delta"] == pytest.approx(5.0)
    assert out["sd_delta"] == pytest.approx(20.81666, abs=1e-5)
    assert out["mde"] == pytest.approx(29.1598, abs=1e-3)
    assert out["significant"] is False and out["verdict"] == "within MDE"
    # Flips first (2: completed → failed, 3: failed → completed), largest |Δ| first.
    assert [f["route_id"] for f in out["flips"]] == ["3", "2"]
    assert [r["route_id"] for r in out["routes"]] == ["3", "2", "1", "4"]
    assert out["only_a"] == ["5"] and out["only_b"] == ["6"]
    page = report.read_text()
    assert "<svg" in page
    # Static: nothing fetched (the SVG namespace is a name, not a request).
    rest = page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "://" not in rest and "src=" not in rest and "href=" not in rest and "<script" not in rest


def test_significant_when_mean_beyond_mde(tmp_path: Path, capsys):
    rows_a = [(str(i), "Completed", 50.0) for i in range(1, 11)]
    rows_b = [(str(i), "Completed", 80.0 + (i % 2)) for i in range(1, 11)]
    (tmp_path / "a.json").write_text(json.dumps(checkpoint(rows_a)))
    (tmp_path / "b.json").write_text(json.dumps(checkpoint(rows_b)))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["significant"] is True and out["mean_delta"] == pytest.approx(30.5) and out["flips"] == []


def test_folder_run_and_unreadable_run(tmp_path: Path, capsys):
    (tmp_path / "runa").mkdir()
    (tmp_path / "runa" / "p0.json").write_text(json.dumps(checkpoint([("1", "Completed", 10.0)])))
    (tmp_path / "runa" / "p1.json").write_text(json.dumps(checkpoint([("2", "Completed", 20.0)])))
    (tmp_path / "b.json").write_text(json.dumps(checkpoint([("1", "Completed", 30.0), ("2", "Completed", 20.0)])))
    assert main(["compare", str(tmp_path / "runa"), str(tmp_path / "b.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 2 and out["mean_delta"] == pytest.approx(10.0)
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "b.json")]) == 2
    assert "nope" in capsys.readouterr().err
