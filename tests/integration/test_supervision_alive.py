"""Keeping the supervision alive (issue 15): a harness killed (-9) or stopped (SIGSTOP) is seen as such;
a new supervisor adopts a still-running evaluator (and continues the attempt count); a harness whose
wrapper died adopts the orphan evaluator itself; a full state dir does not kill the supervisor.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from sim import rig as sim
from tests.support.evalops_sim import alive, cli, harness_report, harness_state, sim_rig, wait_until

AUTO = {"auto": True, "watch_s": 0.5, "max_recoveries": 5, "quarantine_after": 0}


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


def _status(rig_yaml: Path) -> dict:
    out = cli(rig_yaml, "status", "--json", "--no-rpc")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["sides"]["A"]


def _events(d: Path) -> list[str]:
    path = d / "state" / "sides" / "A" / "events.jsonl"
    return [json.loads(ln)["kind"] for ln in path.read_text().splitlines()] if path.exists() else []


def test_killed_and_stopped_harness_seen_then_adopted(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor=AUTO) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running" and s, 30)
        assert st
        os.kill(st["pid"], signal.SIGSTOP)
        try:
            assert wait_until(lambda: _status(rig_yaml)["supervisor"]["state"] == "frozen", 15)
        finally:
            os.kill(st["pid"], signal.SIGCONT)
        os.kill(st["pid"], signal.SIGKILL)
        assert wait_until(lambda: not alive(st["pid"], st["create_time"]), 10)
        s = _status(rig_yaml)
        assert s["supervisor"]["state"] == "dead", s["supervisor"]
        assert s["lifecycle"] == "RUNNING" and "unsupervised" in s["lifecycle_reason"]

        out = cli(rig_yaml, "adopt", "A", "--yes", "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        new = wait_until(lambda: (h := harness_state(d, "A")) and h["pid"] != st["pid"] and h["status"] == "running"
                         and h, 30)
        assert new and new["attempt"] == 1 and "adopted" in _events(d)
        assert _status(rig_yaml)["supervisor"]["state"] == "watching"
        audit = [json.loads(ln) for ln in (d / "state" / "audit.jsonl").read_text().splitlines()]
        assert any(a["operation"] == "adopt" and a["outcome"] == "done" for a in audit)
        # The adopted run is supervised: a hang is recovered, and the attempt count goes on from 1.
        sim.inject(d, "A", "hang")
        assert wait_until(lambda: "recovered" in _events(d), 90, every=0.3), _events(d)
        assert harness_state(d, "A")["attempt"] == 2
        # A second adopt while a harness watches is refused.
        assert cli(rig_yaml, "adopt", "A", "--yes").returncode == 3


def test_wrapper_killed_the_harness_adopts_the_orphan(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor=AUTO) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running", 30)
        chain = wait_until(lambda: (c := _status(rig_yaml)["evaluator"]["chain"]) and len(c) == 4 and c, 30)
        assert [m["role"] for m in chain] == ["harness", "wrapper", "shell", "evaluator"]
        os.kill(chain[1]["pid"], signal.SIGKILL)              # the OOM killer takes the conda wrapper
        assert wait_until(lambda: "adopted" in _events(d), 30), _events(d)
        st = harness_state(d, "A")
        assert st["status"] == "running" and st["attempt"] == 1
        assert alive(chain[2]["pid"])
        assert alive(st["pid"], st["create_time"]), harness_report(d, "A", st["pid"], st["create_time"])
        sim.inject(d, "A", "finish")
        assert wait_until(lambda: (harness_state(d, "A") or {}).get("status") == "finished", 60)


def test_full_state_dir_does_not_kill_the_supervisor(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), routes=200, supervisor=AUTO) as rig_yaml:
        side_dir = d / "state" / "sides" / "A"
        side_dir.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(side_dir)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        try:
            assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
            st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running" and s, 30)
            assert st
            filler = side_dir / "filler"
            with open(filler, "wb") as f:      # fill it: every write of the supervisor now fails (ENOSPC)
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError:
                    pass
            sim.inject(d, "A", "crash")
            # The attempt ends; the next one needs a checkpoint backup first (nothing lost), which the full
            # state dir refuses: the supervisor stays alive, starts nothing, and keeps trying.
            first = st["attempts"][0]
            assert wait_until(lambda: not alive(first["evaluator_pid"], first["evaluator_create_time"]), 30)
            assert wait_until(lambda: _status(rig_yaml)["lifecycle"] == "STARTING", 30), _status(rig_yaml)
            audit = d / "state" / "audit.jsonl"
            assert wait_until(lambda: "checkpoint backup not written" in audit.read_text(), 30)
            assert alive(st["pid"], st["create_time"]), ("the supervisor died of a full state dir\n"
                                                         + harness_report(d, "A", st["pid"], st["create_time"]))
            assert _status(rig_yaml)["evaluator"]["state"] == "DEAD"
            filler.unlink()                                       # room again: it writes and goes on
            now = wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] == 2 and s["status"] == "running"
                             and s, 60)
            assert now and now["unsaved"] is None and now["attempts"][1]["backup"], harness_state(d, "A")
            assert alive(st["pid"], st["create_time"]), harness_report(d, "A", st["pid"], st["create_time"])
            assert now["pid"] == st["pid"]
            assert cli(rig_yaml, "stop", "A", "--yes").returncode == 0   # the whole chain, through the guard
        finally:
            subprocess.run(["umount", "-l", str(side_dir)], capture_output=True)
