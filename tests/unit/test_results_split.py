"""`split` on the real 220 routes: every route once and unchanged, parts balanced, sample stratified."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from console.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
ROUTES = DATA / "bench2drive220.xml"
CKPT = DATA / "b2d_checkpoint_tfpp_0.json"

# Each <route ...>...</route> element of the original, found by text, not by the code under test.
_ROUTE = re.compile(rb'<route id="([^"]+)".*?</route>', re.S)


def originals() -> dict[str, bytes]:
    return {m.group(1).decode(): m.group(0) for m in _ROUTE.finditer(ROUTES.read_bytes())}


def split_json(capsys, *argv: str) -> dict:
    rc = main(["split", "--routes", str(ROUTES), *argv, "--json"])
    assert rc == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_four_parts_every_route_once_unchanged_and_balanced(tmp_path, capsys):
    before = ROUTES.read_bytes()
    out = split_json(capsys, "--parts", "4", "--out", str(tmp_path))
    orig = originals()
    seen: list[str] = []
    for part in out["parts"]:
        data = Path(part["file"]).read_bytes()
        ET.fromstring(data)  # a well-formed routes file
        found = {m.group(1).decode(): m.group(0) for m in _ROUTE.finditer(data)}
        assert list(found) == part["routes"]
        for rid, element in found.items():
            assert element == orig[rid], rid  # byte for byte
        seen += part["routes"]
    assert sorted(seen) == sorted(orig) and len(seen) == 220 == len(set(seen))
    times = [p["expected_s"] for p in out["parts"]]
    assert max(times) <= 1.10 * min(times)
    assert ROUTES.read_bytes() == before  # the user's file is only read


def test_stats_from_a_real_run_set_the_town_mean(tmp_path, capsys):
    out = split_json(capsys, "--parts", "3", "--out", str(tmp_path), "--stats", str(CKPT))
    recs = json.loads(CKPT.read_text())["_checkpoint"]["records"]
    assert out["basis"]["towns_seen"] == ["Town12"] and out["basis"]["rests_on"] == len(recs)
    times = [p["expected_s"] for p in out["parts"]]
    assert max(times) <= 1.10 * min(times)
    # The Town12 share of each part's time is its Town12 count times the run's mean Town12 wall time.
    mean12 = sum(r["meta"]["duration_system"] for r in recs) / len(recs)
    total = sum(times)
    n12 = sum(p["towns"].get("Town12", 0) for p in out["parts"])
    assert n12 == 104 and total > n12 * mean12 * 0.999


def test_sample_is_stratified_by_town(tmp_path, capsys):
    out = split_json(capsys, "--parts", "2", "--out", str(tmp_path), "--sample", "20")
    by_town = out["sample"]["by_town"]
    towns = Counter(r.get("town") for r in ET.parse(ROUTES).getroot().findall("route"))
    assert sum(by_town.values()) == 20 and set(by_town) == set(towns)
    assert all(n >= 1 for n in by_town.values())
    # The towns above the one-route floor share the rest in proportion (largest remainder: within 1).
    big = {t: n for t, n in by_town.items() if n > 1}
    rest = sum(big.values())
    pool = sum(towns[t] for t in big)
    for t, n in big.items():
        assert abs(n - rest * towns[t] / pool) < 1, t
    assert big == {"Town12": 7, "Town13": 3}
    parts_routes = [r for p in out["parts"] for r in p["routes"]]
    assert len(parts_routes) == 20 == len(set(parts_routes))


def test_refuses_to_overwrite_and_writes_a_config_snippet(tmp_path, capsys):
    split_json(capsys, "--parts", "2", "--out", str(tmp_path))
    assert main(["split", "--routes", str(ROUTES), "--parts", "2", "--out", str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err
    snippet = (tmp_path / "bench2drive220_sides.yaml").read_text()
    assert "part0:" in snippet and "part1:" in snippet and "bench2drive220_part1.xml" in snippet


def test_contiguous_split_is_worse(tmp_path, capsys):
    """Bench2Drive's split_xml.py (contiguous chunks) against ours, both under the same prior."""
    from ops.results.routes_xml import parse_routes_table
    from ops.results.walltime import prior_s
    table = parse_routes_table(ROUTES.read_bytes())
    k, m = divmod(220, 4)
    chunks = [table.routes[i * k + min(i, m):(i + 1) * k + min(i + 1, m)] for i in range(4)]
    contiguous = [sum(prior_s(r.town, r.length_m) for r in c) for c in chunks]
    out = split_json(capsys, "--parts", "4", "--out", str(tmp_path))
    ours = [p["expected_s"] for p in out["parts"]]
    assert max(ours) / min(ours) < max(contiguous) / min(contiguous)


def test_with_a_rig_the_written_config_is_valid_for_n_sides(tmp_path, capsys):
    from ops.config import load_config
    rig_dir = tmp_path / "rig"
    rig_dir.mkdir()
    cfg = rig_dir / "rig.yaml"
    cfg.write_text("""\
version: 1
state_dir: state
hosts:
  here: {type: local, os: linux}
  win: {type: ssh, address: 10.0.0.2, user: carla, os: windows, known_hosts: keys/known_hosts}
sides:
  ue4:
    server: {host: win, command: [CarlaUE4.exe, -RenderOffScreen], rpc_port: 2031}
    evaluator:
      host: here
      conda_env: env
      cwd: b2d
      script: leaderboard_evaluator.py
      routes: routes.xml
      checkpoint: results/ue4/result.json
      log: logs/ue4.log
      tm_port: 8010
      args: {agent: team_code/agent.py, timeout: 600}
    expect_wall_game_min: 4
""")
    out_dir = tmp_path / "parts"
    assert main(["-c", str(cfg), "split", "--routes", str(ROUTES), "--parts", "4", "--out", str(out_dir),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config_snippet"] == str(out_dir / "bench2drive220_rig.yaml")
    orig = load_config(cfg)
    rig = load_config(out["config_snippet"])             # check-config's own loader accepts it as written
    assert list(rig.sides) == [f"bench2drive220_part{i}" for i in range(4)]
    assert rig.state_dir == orig.state_dir and rig.hosts["win"].known_hosts == orig.hosts["win"].known_hosts
    for i, (side, part) in enumerate(zip(rig.sides.values(), out["parts"])):
        assert side.evaluator.path(side.evaluator.routes) == str(Path(part["file"]).resolve())
        assert side.server.rpc_port == 2031 + 10 * i and side.evaluator.tm_port == 8010 + 10 * i
        assert side.evaluator.cwd == orig.sides["ue4"].evaluator.cwd and side.expect_wall_game_min == 4.0
        assert dict(side.evaluator.args) == {"agent": "team_code/agent.py", "timeout": "600"}
