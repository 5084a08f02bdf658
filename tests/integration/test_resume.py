"""The resume rule and the checkpoint backup: pure cases, then real launches on the sim rig.

`--resume` is argparse `type=bool` in Bench2Drive (`--resume False` is True), so the argv is checked
against the fake evaluator's own copy of that parser; a total mismatch would make Bench2Drive empty the
checkpoint, so a launch must refuse it and leave the file's bytes as they were.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ops.actions import resume as rr
from ops.actions.launch import evaluator_args, evaluator_argv
from ops.config import load_config
from ops.parse.routes import parse_routes
from sim.fake_evaluator import build_parser
from sim.routes import routes_xml
from tests.support.evalops_sim import checkpoint, cli, harness_state, sim_rig, wait_until, write_checkpoint

ROUTES10 = routes_xml(10).encode()
IDS10 = list(parse_routes(ROUTES10).checkpoint_ids())


def _cp(tmp_path: Path, done: int, total: int, ids: list[str] = IDS10, status: str = "Started") -> bytes:
    return write_checkpoint(tmp_path / "cp.json", ids, done, total, status)


# ---- the rule, pure -------------------------------------------------------------------------------

def test_no_checkpoint_means_no_resume_flag() -> None:
    d = rr.decide(None)
    assert (d.resume, d.flag, d.verdict, d.refused) == (False, (), rr.CP_ABSENT, None)


def test_checkpoint_without_completed_record_means_no_resume_flag(tmp_path: Path) -> None:
    d = rr.decide(_cp(tmp_path, 0, 10), ROUTES10)
    assert (d.resume, d.flag, d.refused) == (False, (), None)


def test_completed_records_mean_resume_true(tmp_path: Path) -> None:
    d = rr.decide(_cp(tmp_path, 3, 10), ROUTES10)
    assert (d.resume, d.flag, d.completed, d.total, d.routes) == (True, ("--resume", "True"), 3, 10, 10)


def test_total_mismatch_refuses_with_both_numbers(tmp_path: Path) -> None:
    d = rr.decide(_cp(tmp_path, 3, 12), ROUTES10)
    assert not d.resume and d.verdict == rr.CP_MISMATCH
    assert "12" in d.refused and "10" in d.refused


def test_route_ids_that_differ_refuse(tmp_path: Path) -> None:
    ids = list(IDS10)
    ids[1] = "RouteScenario_999999_rep0"
    d = rr.decide(_cp(tmp_path, 3, 10, ids), ROUTES10)
    assert d.verdict == rr.CP_MISMATCH and "RouteScenario_999999_rep0" in d.refused


@pytest.mark.parametrize("raw", [b"", b"{\"_checkpoint\": {\"progress\": [3, 1", b"[1, 2]", b"\x00\xff"])
def test_unparseable_checkpoint_is_unknown_never_empty(raw: bytes) -> None:
    d = rr.decide(raw, ROUTES10)
    assert d.verdict == rr.CP_UNKNOWN and d.refused and not d.resume


def test_unreadable_routes_file_is_unknown(tmp_path: Path) -> None:
    d = rr.decide(_cp(tmp_path, 3, 10), "routes.xml does not exist")
    assert d.verdict == rr.CP_UNKNOWN and d.refused


def test_invalid_entry_status_refuses_a_resume(tmp_path: Path) -> None:
    d = rr.decide(_cp(tmp_path, 3, 10, status="Invalid"), ROUTES10)
    assert d.verdict == rr.CP_MISMATCH and d.refused


# ---- the argv against the evaluator's own type=bool parser ---------------------------------------

def _config(tmp_path: Path):
    (tmp_path / "w").mkdir()
    (tmp_path / "rig.yaml").write_text(f"""version: 1
state_dir: {tmp_path / 'state'}
hosts: {{local: {{type: local, os: linux}}}}
sides:
  A:
    server: {{host: local, command: [/bin/true], rpc_port: 2000}}
    evaluator: {{host: local, conda_env: envA, cwd: {tmp_path / 'w'}, script: ev.py, routes: r.xml,
                checkpoint: results/cp.json, log: logs/ev.log, tm_port: 8010,
                args: {{agent: agent.py, timeout: 600}}}}
""")
    return load_config(tmp_path / "rig.yaml")


def test_argv_parsed_by_the_evaluators_own_parser(tmp_path: Path) -> None:
    rig = _config(tmp_path)
    side = rig.side("A")
    parser = build_parser()
    fresh = parser.parse_args(evaluator_args(side, resume=False))
    resumed = parser.parse_args(evaluator_args(side, resume=True))
    assert fresh.resume is False and "--resume" not in evaluator_args(side, False)
    assert resumed.resume is True
    assert (fresh.port, fresh.traffic_manager_port, fresh.timeout) == (2000, 8010, 600.0)
    assert fresh.checkpoint == str(tmp_path / "w" / "results" / "cp.json")
    # The trap the rule exists for: the parser reads "False" as True.
    assert parser.parse_args([*evaluator_args(side, False), "--resume", "False"]).resume is True
    argv = evaluator_argv(rig, side, resume=True)
    assert argv[:8] == ["conda", "run", "-n", "envA", "--no-capture-output", "--cwd", str(tmp_path / "w"), "python"]
    assert argv[8] == "ev.py" and argv[-6:-4] == ["--resume", "True"]


def test_backup_is_byte_identical_and_never_overwrites(tmp_path: Path) -> None:
    rig = _config(tmp_path)
    raw = b'{"odd":  "spacing\\u00e9",\r\n "x": 1}'   # bytes a decode/encode round trip would change
    a = rr.backup(rig, rig.side("A"), raw)
    b = rr.backup(rig, rig.side("A"), raw)
    assert a != b and Path(a).read_bytes() == raw == Path(b).read_bytes()
    assert Path(a).parent == tmp_path / "state" / "sides" / "A" / "backups"
    assert rr.backup(rig, rig.side("A"), None) is None


# ---- real launches on the sim rig ----------------------------------------------------------------

def _attempt_resume_flag(argv: list[str]) -> bool:
    """What the fake evaluator's parser makes of the argv the harness really ran."""
    return build_parser().parse_args(argv[argv.index("leaderboard_evaluator.py") + 1:]).resume


def test_launch_on_the_sim(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d) as rig_yaml:
        work = d / "work"
        # A: a total of 12 against a routes file of 10 → refused, dry-run and real alike; bytes unchanged.
        raw_a = write_checkpoint(work / "A" / "results" / "result.json", IDS10, 3, 12)
        dry = cli(rig_yaml, "launch", "A", "--dry-run", "--json")
        assert dry.returncode == 3, dry.stderr
        out = json.loads(dry.stdout)
        assert "12" in out["refused"] and "10" in out["refused"] and out["resume"] is False
        real = cli(rig_yaml, "launch", "A", "--yes", "--json")
        assert real.returncode == 3 and json.loads(real.stdout)["refused"] == out["refused"]
        assert (work / "A" / "results" / "result.json").read_bytes() == raw_a
        assert harness_state(d, "A") is None          # no harness was started

        # B: 3 of 10 done → --resume True, a byte-identical backup made before the evaluator rewrote it.
        raw_b = write_checkpoint(work / "B" / "results" / "result.json", IDS10, 3, 10)
        dry = json.loads(cli(rig_yaml, "launch", "B", "--dry-run", "--json").stdout)
        assert dry["refused"] is None and dry["resume"] is True and dry["backup"]
        assert dry["argv"][-2:] != ["--resume", "False"] and "--resume" in dry["argv"]
        res = cli(rig_yaml, "launch", "B", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        st = wait_until(lambda: (s := harness_state(d, "B")) and s["attempts"] and s, 10)
        attempt = st["attempts"][0]
        assert attempt["resume"] is True and _attempt_resume_flag(attempt["argv"]) is True
        backups = sorted((d / "state" / "sides" / "B" / "backups").iterdir())
        assert backups and all(b.read_bytes() == raw_b for b in backups)
        assert attempt["backup"] in {str(b) for b in backups}
        # The evaluator resumed after the 3 records: they are still there once it writes again.
        cp = wait_until(lambda: (c := checkpoint(d, "B")) and c["_checkpoint"]["progress"][0] >= 4 and c, 20)
        assert cp, "the resumed evaluator made no progress"
        assert [r["route_id"] for r in cp["_checkpoint"]["records"][:3]] == IDS10[:3]
        assert "Resuming from route 3 of 10" in (work / "B" / "logs" / "eval.log").read_text()


def test_fresh_launch_passes_no_resume_at_all(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        res = cli(rig_yaml, "launch", "A", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        out = json.loads(res.stdout)
        assert out["resume"] is False and "--resume" not in out["argv"] and out["backup"] is None
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["attempts"] and s, 10)
        assert "--resume" not in st["attempts"][0]["argv"]
        assert _attempt_resume_flag(st["attempts"][0]["argv"]) is False


def _with_statuses(path: Path, statuses: dict[int, str], entry: str | None = None) -> bytes:
    data = json.loads(path.read_text())
    for i, st in statuses.items():
        data["_checkpoint"]["records"][i]["status"] = st
    if entry:
        data["entry_status"] = entry
    raw = (json.dumps(data, indent=4) + "\n").encode()
    path.write_bytes(raw)
    return raw


def test_dry_run_says_runs_and_overwrites_and_a_subset_run_merges_back(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d) as rig_yaml:
        work = d / "work"
        # A: every route final → nothing to run: refused with that reason, dry-run and real alike.
        cp_a = work / "A" / "results" / "result.json"
        raw_a = write_checkpoint(cp_a, IDS10, 10, 10, "Finished")
        dry = cli(rig_yaml, "launch", "A", "--dry-run", "--json")
        out = json.loads(dry.stdout)
        assert dry.returncode == 3 and "nothing to run" in out["refused"] and out["runs"] == []
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 3 and cp_a.read_bytes() == raw_a

        # B: an agent crash at route 1, a simulation crash at route 4 (the evaluator stopped there).
        cp_b = work / "B" / "results" / "result.json"
        write_checkpoint(cp_b, IDS10, 5, 10)
        raw_b = _with_statuses(cp_b, {1: "Failed - Agent crashed", 4: "Failed - Simulation crashed"}, "Crashed")
        out = json.loads(cli(rig_yaml, "launch", "B", "--dry-run", "--json").stdout)
        assert out["refused"] is None and out["run_plan"]["mode"] == "subset" and out["resume"] is False
        assert out["runs"] == [IDS10[1], *IDS10[4:]] and out["overwrites"] == [IDS10[1], IDS10[4]]
        assert out["run_plan"]["real_runs"] == IDS10[0:]          # Bench2Drive: one before route 1 → all
        res = cli(rig_yaml, "launch", "B", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        st = wait_until(lambda: (s := harness_state(d, "B")) and s["attempts"] and s, 10)
        argv = st["attempts"][0]["argv"]        # the harness planned again: its own subset files
        routes = Path(argv[argv.index("--routes") + 1])
        assert routes.is_file() and str(d / "state" / "sides" / "B" / "runs") in str(routes)
        assert parse_routes(routes.read_bytes()).checkpoint_ids() == tuple(out["runs"])
        assert "--resume" not in argv and str(routes.parent) in argv[argv.index("--checkpoint") + 1]
        assert (work / "B" / "routes.xml").read_bytes() == routes_xml(10).encode()   # the user's file
        # Merged back: route 1 re-run in place, routes 0, 2, 3 untouched (the same records).
        before = json.loads(raw_b)["_checkpoint"]["records"]
        cp = wait_until(lambda: (c := checkpoint(d, "B")) and len(c["_checkpoint"]["records"]) >= 6
                        and c["_checkpoint"]["records"][1]["status"] != "Failed - Agent crashed" and c, 30)
        assert cp, checkpoint(d, "B")
        recs = cp["_checkpoint"]["records"]
        assert [r["route_id"] for r in recs] == IDS10[:len(recs)]
        assert [recs[i] for i in (0, 2, 3)] == [before[i] for i in (0, 2, 3)]
        assert [r["index"] for r in recs] == list(range(len(recs)))
        log = (d / "state" / "sides" / "B" / "harness.log").read_text()
        assert "runs: " + " ".join(out["runs"]) in log and "overwrites: " + " ".join(out["overwrites"]) in log


def test_launch_creates_the_checkpoint_folder_the_evaluator_never_does(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        results = d / "work" / "A" / "results"
        results.rmdir()                          # a fresh rig: results/ue4/ does not exist yet
        res = cli(rig_yaml, "launch", "A", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        cp = wait_until(lambda: (c := checkpoint(d, "A")) and c["_checkpoint"]["records"] and c, 20)
        assert cp, (d / "work" / "A" / "logs" / "eval.log").read_text()[-1500:]
        assert "FileNotFoundError" not in (d / "work" / "A" / "logs" / "eval.log").read_text()


def test_launch_runs_python_unbuffered_so_the_heartbeat_moves(tmp_path: Path) -> None:
    assert "PYTHONUNBUFFERED" not in os.environ     # tests/conftest.py: this machine's export is dropped
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), route_s=60) as rig_yaml:
        dry = json.loads(cli(rig_yaml, "launch", "A", "--dry-run", "--json").stdout)
        assert dry["env"]["PYTHONUNBUFFERED"] == "1"
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        log = d / "work" / "A" / "logs" / "eval.log"
        # The fake flushes nothing per tick (Leaderboard 2 style): only an unbuffered run shows ticks now.
        assert wait_until(lambda: log.exists() and "step 3 " in log.read_text(), 20), log.read_text()[-800:]
