"""Launch-time and config faults, each on its own sim rig (no evaluator running until a launch):
a port inside a reserved range, the `--resume type=bool` trap, a checkpoint whose total ≠ the routes
count, a checkpoint read while it is being rewritten, two sides on the default TM port, and a shared
-graphicsadapter while an evaluator manages its own server."""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from ops.config import ConfigError, load_config
from ops.parse.routes import parse_routes
from ops.rig import open_rig
from sim.fake_evaluator import build_parser
from sim.layout import SimLayout
from tests.faults.common import rewrite
from tests.faults.harness_kit import Audit, Procs, Records, backups, checkpoint_path, completed, evaluators_of
from tests.support.evalops_sim import checkpoint, cli, harness_state, sides, sim_rig, wait_until, write_checkpoint


@pytest.fixture
def rig(tmp_path):
    d = tmp_path / "sim"
    with sim_rig(d, routes=10, route_s=1.0, tick_s=0.2, stall_s=2.0) as rig_yaml:
        yield d, rig_yaml


def _ids(d: Path, side: str) -> list[str]:
    return list(parse_routes((d / "work" / side / "routes.xml").read_bytes()).checkpoint_ids())


@pytest.mark.scenario("port-in-reserved-range")
def test_port_inside_a_reserved_range(rig) -> None:
    d, rig_yaml = rig
    n = sides(d)["B"]["rpc_port"]
    SimLayout.of(d).excluded_json.write_text(json.dumps([[80, 80, False], [n + 1, n + 60, False]]))
    before = Procs.snapshot()
    res = cli(rig_yaml, "ports", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    b = json.loads(res.stdout)["sides"]["B"]
    assert {c["port"] for c in b["conflicts"]} == {n + 1, n + 2} and b["suggestion"]
    assert json.loads(res.stdout)["sides"]["A"]["conflicts"] == []
    launch = cli(rig_yaml, "launch", "B", "--yes", "--json")
    assert launch.returncode == 3, launch.stdout
    out = json.loads(launch.stdout)
    assert out["verdicts"]["ports"] == "CONFLICT" and str(n + 1) in out["refused"]
    assert harness_state(d, "B") is None and not evaluators_of(n, sides(d)["B"]["tm_port"])
    Procs.check(before, planned=[])


@pytest.mark.scenario("resume-type-bool-trap")
def test_resume_flag_only_true_and_only_with_completed_records(rig) -> None:
    d, rig_yaml = rig
    parser = build_parser()
    assert parser.parse_args(["--routes", "r.xml", "--agent", "a.py", "--resume", "False"]).resume is True  # the trap
    raw_a = write_checkpoint(checkpoint_path(d, "A"), _ids(d, "A"), 3, 10)
    write_checkpoint(checkpoint_path(d, "B"), _ids(d, "B"), 0, 10)         # a checkpoint, nothing completed
    rec = Records({"A": checkpoint_path(d, "A")})
    audit = Audit(d / "state")
    mark = audit.mark()
    for side in ("A", "B"):
        res = cli(rig_yaml, "launch", side, "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
    argv = {}
    for side in ("A", "B"):
        st = wait_until(lambda: (s := harness_state(d, side)) and s["attempts"] and s, 10)
        argv[side] = st["attempts"][0]["argv"]
    tail = {s: a[a.index("leaderboard_evaluator.py") + 1:] for s, a in argv.items()}
    i = tail["A"].index("--resume")
    assert tail["A"][i + 1] == "True" and tail["A"].count("--resume") == 1 and parser.parse_args(tail["A"]).resume is True
    assert "--resume" not in tail["B"] and parser.parse_args(tail["B"]).resume is False
    assert "False" not in tail["A"] + tail["B"]
    assert backups(d, "A") and all(b.read_bytes() == raw_a for b in backups(d, "A"))
    audit.need(mark, "relaunch", "done")
    assert rec.watch(lambda: (completed(checkpoint_path(d, "A")) or 0) >= 4, 20), "A did not resume"
    cp = wait_until(lambda: checkpoint(d, "A"), 10)   # None while caught half-written (rewritten in place)
    assert [r["route_id"] for r in cp["_checkpoint"]["records"][:3]] == _ids(d, "A")[:3]
    rec.check()
    # Config cannot smuggle the flag in by hand either.
    bad = rewrite(rig_yaml, lambda c: c["sides"]["A"]["evaluator"]["args"].update(resume="False"))
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert any(i.line and "resume" in i.key for i in e.value.issues), str(e.value)


@pytest.mark.scenario("checkpoint-total-mismatch")
def test_checkpoint_total_not_routes_count_is_refused_bytes_unchanged(rig) -> None:
    d, rig_yaml = rig
    path = checkpoint_path(d, "A")
    raw = write_checkpoint(path, _ids(d, "A"), 3, 12)
    stat = os.stat(path)
    before = Procs.snapshot()
    for extra in (("--dry-run",), ("--yes",)):
        res = cli(rig_yaml, "launch", "A", *extra, "--json")
        assert res.returncode == 3, res.stdout + res.stderr
        why = json.loads(res.stdout)["refused"]
        assert "12" in why and "10" in why
    st2 = os.stat(path)
    assert path.read_bytes() == raw and (st2.st_mtime_ns, st2.st_ino) == (stat.st_mtime_ns, stat.st_ino)
    assert harness_state(d, "A") is None
    Procs.check(before, planned=[])
    count_records = Records({"A": path})
    assert count_records.high["A"] == 3
    count_records.check()


@pytest.mark.scenario("checkpoint-read-while-rewritten")
def test_checkpoint_caught_half_written_is_unknown_never_zero(rig) -> None:
    d, rig_yaml = rig
    path = checkpoint_path(d, "A")
    ids = _ids(d, "A")
    full = write_checkpoint(path, ids, 4, 10)
    stop = threading.Event()
    written: list[bytes] = []

    def rewriter() -> None:
        # The evaluator's way: truncate, then write the new document in pieces (not atomic).
        n = 4
        while not stop.is_set():
            n = min(n + 1, 10)
            data = write_checkpoint(d / "next.json", ids, n, 10)
            with open(path, "wb") as fh:
                for i in range(0, len(data), 512):
                    fh.write(data[i:i + 512])
                    fh.flush()
                    time.sleep(0.002)
            written.append(data)

    seen = []

    async def poll() -> None:
        async with open_rig(load_config(rig_yaml)) as live:
            for _ in range(40):
                snap = await live.prober.side("A", rpc=False)
                seen.append((snap.evaluator.checkpoint.progress, snap.evaluator.checkpoint.error))

    t = threading.Thread(target=rewriter)
    t.start()
    try:
        asyncio.run(poll())
    finally:
        stop.set()
        t.join()
    assert written
    for progress, err in seen:
        assert progress is None or progress[0] >= 4, (progress, err)      # never 0, never less than was
        assert progress is not None or err
    # A half-written file at rest: UNKNOWN progress, launch refused, the file untouched.
    half = full[: len(full) // 2]
    path.write_bytes(half)
    stat = os.stat(path)
    before = Procs.snapshot()
    a = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]["evaluator"]
    assert a["progress"] is None and a["progress_error"], a
    res = cli(rig_yaml, "launch", "A", "--yes", "--json")
    assert res.returncode == 3 and json.loads(res.stdout)["refused"], res.stdout
    st2 = os.stat(path)
    assert path.read_bytes() == half and (st2.st_mtime_ns, st2.st_ino) == (stat.st_mtime_ns, stat.st_ino)
    assert harness_state(d, "A") is None
    Procs.check(before, planned=[])
    path.write_bytes(written[-1])
    rec = Records({"A": path})
    assert rec.high["A"] >= 4
    rec.check()


@pytest.mark.scenario("two-sides-default-tm-port")
def test_two_sides_on_the_default_tm_port_is_a_config_error(rig) -> None:
    d, rig_yaml = rig
    bad = rewrite(rig_yaml, lambda c: [s["evaluator"].pop("tm_port") for s in c["sides"].values()])
    before = Procs.snapshot()
    res = cli(bad, "check-config")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{bad}:" in res.stderr and "sides.B.evaluator.tm_port" in res.stderr and "8000" in res.stderr
    line = res.stderr.split(f"{bad}:", 1)[1].split(":", 1)[0]
    assert line.isdigit(), res.stderr
    for cmd in (("launch", "A", "--yes"), ("status", "--json")):
        assert cli(bad, *cmd).returncode == 2
    assert harness_state(d, "A") is None and harness_state(d, "B") is None
    Procs.check(before, planned=[])


@pytest.mark.scenario("shared-graphicsadapter-managed")
def test_shared_graphicsadapter_with_an_evaluator_managed_server_warns(rig) -> None:
    d, rig_yaml = rig
    plain = cli(rig_yaml, "check-config")
    assert plain.returncode == 0 and "warning" not in plain.stdout     # shared adapter, console-managed: fine
    managed = rewrite(rig_yaml, lambda c: c["sides"]["A"]["server"].update(managed_by_evaluator=True))
    res = cli(managed, "check-config")
    assert res.returncode == 0, res.stderr
    warn = [ln for ln in res.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "-graphicsadapter=0" in warn[0] and "A" in warn[0] and "B" in warn[0], res.stdout
    # What really kills across sides is tools/clean_carla.sh (killall -9 -r CarlaUE4-Linux), whatever the
    # adapters; Bench2Drive's own grep '-graphicsadapter=K' kill is a no-op (design.md §4, issue 14 fact 11).
    assert "no-op" in warn[0] and "clean_carla.sh" in warn[0]
    other = rewrite(managed, lambda c: c["sides"]["B"]["server"].update(adapter=1), name="other.yaml")
    out = cli(other, "check-config").stdout
    assert "clean_carla.sh" in out and "-graphicsadapter=0)" not in out
