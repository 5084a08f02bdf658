"""`carla-console -c RIG results`: a rig's sides read through their hosts, merged once, per side too."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
ROUTES = DATA / "bench2drive220.xml"
CKPT = DATA / "b2d_checkpoint_tfpp_0.json"


def _rig(tmp_path: Path, floor_a: float | None = None) -> Path:
    cwd = tmp_path / "b2d"
    for side in ("a", "b"):
        (cwd / "results" / side).mkdir(parents=True)
    (cwd / "routes.xml").write_bytes(ROUTES.read_bytes())
    data = json.loads(CKPT.read_text())
    (cwd / "results" / "a" / "result.json").write_text(json.dumps(data))
    other = copy.deepcopy(data)
    other["_checkpoint"]["records"] = other["_checkpoint"]["records"][:2]   # a duplicate of side a's first two
    (cwd / "results" / "b" / "result.json").write_text(json.dumps(other))
    floor = f"\n  expect_wall_game_min: {floor_a}" if floor_a else ""
    sides = ""
    for i, side in enumerate(("a", "b")):
        sides += textwrap.dedent(f"""\
          {side}:
            server: {{host: here, command: [CarlaUE4.sh], rpc_port: {2000 + 10 * i}}}
            evaluator:
              host: here
              conda_env: env
              cwd: {cwd}
              script: leaderboard_evaluator.py
              routes: routes.xml
              checkpoint: results/{side}/result.json
              log: logs/{side}.log
              tm_port: {8010 + 10 * i}""") + (floor if side == "a" else "") + "\n"
    cfg = tmp_path / "rig.yaml"
    cfg.write_text("version: 1\nstate_dir: state\nhosts:\n  here: {type: local, os: linux}\nsides:\n"
                   + textwrap.indent(sides, "  "))
    return cfg


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *argv], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})


def test_rig_results_merge_sides_and_name_the_duplicates(tmp_path):
    cfg = _rig(tmp_path, floor_a=8.0)
    res = _cli("-c", str(cfg), "results", "--json")
    assert res.returncode == 1, res.stderr   # findings: missing routes, duplicates, fake-success floor
    out = json.loads(res.stdout)
    assert out["total"] == 220 and out["recorded"] == 28
    assert out["duplicates"] == ["1711", "1773"]
    assert out["duplicate_detail"][0]["sources"] == ["side:a", "side:b"]
    glob = json.loads(CKPT.read_text())["_checkpoint"]["global_record"]
    assert abs(out["ds"] - glob["scores_mean"]["score_composed"] * 28 / 220) < 1e-4
    assert out["sides"]["a"]["recorded"] == 28 and out["sides"]["b"]["recorded"] == 2
    assert out["sides"]["a"]["fake_success"]["flagged"] is True      # ~6x wall/game under a floor of 8x
    assert out["sides"]["b"]["fake_success"]["flagged"] is False     # no floor configured
    assert out["sides"]["a"]["eta"]["routes_left"] == 192 and out["sides"]["a"]["eta"]["rests_on"] == 28
    assert out["errors"] == [] and out["fake_success_sides"] == ["a"]
    text = _cli("-c", str(cfg), "results").stdout
    assert "side a: recorded 28/220" in text and "FAKE SUCCESS?" in text and "side b: recorded 2/220" in text


def test_rig_results_one_side_and_a_missing_checkpoint(tmp_path):
    cfg = _rig(tmp_path)
    os.remove(tmp_path / "b2d" / "results" / "b" / "result.json")   # not started yet: no records, no error
    res = _cli("-c", str(cfg), "results", "--side", "b", "--json")
    out = json.loads(res.stdout)
    assert out["recorded"] == 0 and len(out["missing"]) == 220 and out["errors"] == []
    res = _cli("-c", str(cfg), "results", "--side", "zz")
    assert res.returncode == 2 and "zz" in res.stderr and "Traceback" not in res.stderr


def test_compare_a_rig_with_a_checkpoint_file(tmp_path):
    cfg = _rig(tmp_path)
    data = json.loads(CKPT.read_text())
    for rd in data["_checkpoint"]["records"][:4]:
        rd["scores"]["score_composed"] = max(0.0, rd["scores"]["score_composed"] - 40.0)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    res = _cli("compare", str(cfg), str(other), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["n"] == 28 and abs(out["mean_delta"] - (-160.0 / 28)) < 1e-6
