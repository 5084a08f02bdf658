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
