"""Quarantine (issue 15): a route that crashes every time is retired after `quarantine_after` failures;
the side goes on with the rest and finishes; the user's routes XML is untouched, the checkpoint was backed
up and the act audited first; status, `retired` and the events name the route; it can be put back.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from ops.parse.routes import parse_routes
from tests.support.evalops_sim import checkpoint, cli, done_records, harness_state, sim_rig, wait_until


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


def test_a_route_that_always_crashes_is_retired_and_the_side_finishes(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    sup = {"auto": True, "watch_s": 0.5, "quarantine_after": 2, "max_recoveries": 5}
    with sim_rig(d, sides=("A",), routes=6, route_s=0.8, supervisor=sup) as rig_yaml:
        data = yaml.safe_load(rig_yaml.read_text())
        ev = data["sides"]["A"]["evaluator"]
        routes = Path(ev["cwd"]) / ev["routes"]
        ids = parse_routes(routes.read_bytes()).route_ids
        bad = ids[2]
        ev["env"]["SIM_CRASH_ROUTES"] = bad
        ev["max_attempts"] = 10
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        xml_hash = hashlib.sha256(routes.read_bytes()).hexdigest()

        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] in ("finished", "gave_up", "refused")
                        and s, 120, every=0.3)
        assert st and st["status"] == "finished", harness_state(d, "A")
        cid = f"RouteScenario_{bad}_rep0"
        assert st["retired"] == [cid] and st["route_failures"][cid] == 2
        recorded = {r["route_id"] for r in done_records(checkpoint(d, "A"))}
        others = {f"RouteScenario_{i}_rep0" for i in ids if i != bad}
        assert others <= recorded, "a route ended with neither a record nor retired"
        assert hashlib.sha256(routes.read_bytes()).hexdigest() == xml_hash, "the user's routes XML changed"

        audit = [json.loads(ln) for ln in (d / "state" / "audit.jsonl").read_text().splitlines()]
        retire = [a for a in audit if a["operation"] == "retire-route"]
        assert retire and cid in retire[0]["detail"] and "backup" in retire[0]["detail"]
        events = [json.loads(ln) for ln in (d / "state" / "sides" / "A" / "events.jsonl").read_text().splitlines()]
        assert [e["route"] for e in events if e["kind"] == "route-retired"] == [cid]

        snap = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]
        assert snap["supervisor"]["retired"] == [cid] and snap["lifecycle"] == "FINISHED"
        listed = json.loads(cli(rig_yaml, "retired", "A", "--json").stdout)["sides"]["A"]
        assert listed["retired"] == [cid]

        # Put back, with no supervisor running: harness.json says so, and an audit line records it.
        out = cli(rig_yaml, "retired", "A", "--put-back", cid)
        assert out.returncode == 0, out.stdout + out.stderr
        assert harness_state(d, "A")["retired"] == []
        assert cli(rig_yaml, "retired", "A", "--put-back", cid).returncode == 2   # not retired any more
