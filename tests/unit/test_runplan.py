"""The launch plan's `runs` / `overwrites` on checkpoints in Bench2Drive's real format (a TransFuser++
run's checkpoint, tests/data/b2d_checkpoint_tfpp_0.json), against the real resume rule."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from ops.actions.merge import merge_records, subset_routes_xml
from ops.actions.runplan import SETUP_FAILED, plan_runs, real_runs, xml_id
from ops.parse.checkpoint import parse_checkpoint
from ops.parse.routes import parse_routes

DATA = Path(__file__).resolve().parent.parent / "data"
REAL = json.loads((DATA / "b2d_checkpoint_tfpp_0.json").read_text())
IDS = [r["route_id"] for r in REAL["_checkpoint"]["records"]]


def _cp(statuses: dict[int, str], upto: int | None = None, entry: str = "Started") -> tuple[dict, object]:
    """The real checkpoint cut after `upto` records, some statuses changed, as the evaluator leaves it."""
    data = copy.deepcopy(REAL)
    recs = data["_checkpoint"]["records"]
    for i, st in statuses.items():
        recs[i]["status"] = st
    if upto is not None:
        del recs[upto:]
    data["_checkpoint"]["progress"] = [len(recs), len(IDS)]
    data["entry_status"] = entry
    return data, parse_checkpoint(json.dumps(data))


def test_agent_crash_then_simulation_crash_runs_only_those_and_the_rest() -> None:
    # Route 2: agent crashed (the evaluator goes on); route 7: simulation crashed (it stops, Crashed).
    _, cp = _cp({2: "Failed - Agent crashed", 7: "Failed - Simulation crashed"}, upto=8, entry="Crashed")
    plan = plan_runs(cp, IDS)
    assert plan.mode == "subset"
    assert plan.runs == (IDS[2], IDS[7], *IDS[8:])
    assert plan.overwrites == (IDS[2], IDS[7])
    # The real rule: first failure at 2, one earlier for Crashed → re-runs 1..27, replacing 1..7.
    assert plan.real_runs == tuple(IDS[1:])
    assert "would also re-run 5 final route(s)" in plan.reason


def test_plain_failure_in_the_middle_of_a_finished_run() -> None:
    _, cp = _cp({12: "Failed"}, entry="Finished")
    plan = plan_runs(cp, IDS)
    assert (plan.mode, plan.runs, plan.overwrites) == ("subset", (IDS[12],), (IDS[12],))
    assert plan.real_runs == tuple(IDS[12:])


def test_agent_setup_failure_gets_bounded_retries_the_real_rule_moves_past_it() -> None:
    _, cp = _cp({5: SETUP_FAILED}, upto=6)       # exit 255, entry_status stays Started
    assert real_runs(cp, IDS) == tuple(IDS[6:])  # the real rule: route 5 keeps its 0
    plan = plan_runs(cp, IDS)
    assert plan.mode == "subset" and plan.runs == tuple(IDS[5:]) and plan.overwrites == (IDS[5],)
    assert plan.retried == (IDS[5],)
    spent = plan_runs(cp, IDS, setup_tries={IDS[5]: 2})
    assert spent.runs == tuple(IDS[6:]) and spent.lost == (IDS[5],) and spent.mode == "resume"


def test_entry_status_crashed_does_not_rerun_the_route_before() -> None:
    _, cp = _cp({9: "Failed - Simulation crashed"}, upto=10, entry="Crashed")
    plan = plan_runs(cp, IDS)
    assert plan.runs == tuple(IDS[9:]) and plan.overwrites == (IDS[9],)
    assert plan.real_runs == tuple(IDS[8:]) and plan.mode == "subset"


def test_plain_continuation_is_the_evaluators_own_resume() -> None:
    _, cp = _cp({}, upto=10)
    plan = plan_runs(cp, IDS)
    assert (plan.mode, plan.runs, plan.overwrites) == ("resume", tuple(IDS[10:]), ())
    _, cp = _cp({9: "Failed - Agent crashed"}, upto=10)
    plan = plan_runs(cp, IDS)
    assert (plan.mode, plan.runs, plan.overwrites) == ("resume", tuple(IDS[9:]), (IDS[9],))


def test_finished_side_is_refused_with_the_reason() -> None:
    cp = parse_checkpoint(json.dumps(REAL))
    plan = plan_runs(cp, IDS)
    assert plan.mode == "nothing" and plan.runs == () and plan.refused
    assert "nothing to run" in plan.refused and "28" in plan.refused


def test_fresh_and_retired() -> None:
    assert plan_runs(None, IDS).mode == "fresh"
    _, cp = _cp({3: "Failed - Agent crashed"}, upto=4)
    plan = plan_runs(cp, IDS, retired={xml_id(IDS[3]), IDS[20]})
    assert IDS[3] not in plan.runs and IDS[20] not in plan.runs and plan.mode == "subset"
    assert plan.retired == (IDS[3], IDS[20])
    assert plan_runs(None, IDS, retired={xml_id(IDS[0])}).mode == "subset"


def test_merge_puts_records_back_at_their_positions_and_keeps_resume_valid() -> None:
    main, _ = _cp({2: "Failed - Agent crashed", 7: "Failed - Simulation crashed"}, upto=8, entry="Crashed")
    # The subset run's own checkpoint: routes 2, 7, 8 in its indices 0..2.
    sub_recs = []
    for j, i in enumerate((2, 7, 8)):
        r = copy.deepcopy(REAL["_checkpoint"]["records"][i])
        r["index"] = j
        sub_recs.append(r)
    sub = {"_checkpoint": {"global_record": {}, "progress": [3, 22], "records": sub_recs},
           "entry_status": "Started"}
    res = merge_records(main, sub, IDS)
    assert res.merged == (IDS[2], IDS[7], IDS[8])
    recs = res.data["_checkpoint"]["records"]
    assert [r["route_id"] for r in recs] == IDS[:9] and [r["index"] for r in recs] == list(range(9))
    assert recs[2] == {**REAL["_checkpoint"]["records"][2], "index": 2}
    assert res.data["_checkpoint"]["progress"] == [9, 28] and res.data["entry_status"] == "Started"
    # Bench2Drive's own resume on the merged file goes on at route 9, as ours would.
    cp = parse_checkpoint(json.dumps(res.data))
    assert real_runs(cp, IDS) == plan_runs(cp, IDS).runs == tuple(IDS[9:])
    assert main["_checkpoint"]["records"][2]["status"] == "Failed - Agent crashed"   # input untouched


def test_subset_xml_keeps_only_the_wanted_routes_verbatim() -> None:
    xml = (DATA / "bench2drive220.xml").read_bytes()
    ids = parse_routes(xml).checkpoint_ids()
    out = subset_routes_xml(xml, {ids[3], ids[100]})
    assert parse_routes(out).checkpoint_ids() == (ids[3], ids[100])


def test_progress_is_bench2drives_index_not_the_record_count() -> None:
    from ops.probes.evaluator import CheckpointReading
    # A resumed run restarting at route 2 of [P, P, Failed, P, P]: create_route_data replaced record 2 by
    # a running one (index -1, not written), so the file holds records 0, 1, 3, 4 and progress [2, 28].
    data = copy.deepcopy(REAL)
    recs = data["_checkpoint"]["records"][:5]
    del recs[2]
    data["_checkpoint"]["records"] = recs
    data["_checkpoint"]["progress"] = [2, 28]
    data["entry_status"] = "Started"
    cp = parse_checkpoint(json.dumps(data))
    assert all(r.status != "Started" for r in cp.records)   # Started never appears in the file
    assert CheckpointReading(cp, None).progress == (2, 28)
