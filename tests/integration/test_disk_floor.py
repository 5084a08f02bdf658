"""The disk floor (issue 21) on a real filesystem filled past it: a small tmpfs holds side A's checkpoint
and log; filled below the critical floor mid-run, the crash that follows gets no new attempt (a checkpoint
rewritten on a full disk is truncated), the harness says why naming the filesystem, the checkpoint keeps
every record, and the alert names the filesystem.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.evalops_sim import REPO, cli, done_records, harness_state, sim_rig, wait_until

# The alert goes out through S2's notifier to a real local HTTP endpoint once both are in the tree; until
# then the alert is the line in state_dir/alerts.jsonl (asserted either way).
NOTIFY = importlib.util.find_spec("ops.notify") is not None and \
    importlib.util.find_spec("tests.support.http_sink") is not None


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {got.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill_to(mnt: Path, free_mb: int) -> None:
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - free_mb * 2**20))


@pytest.mark.timeout(600)
def test_below_the_critical_floor_no_new_attempt_starts_and_the_checkpoint_is_intact(tmp_path: Path,
                                                                                    tmpfs: Path) -> None:
    d = tmp_path / "sim"
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(importlib.import_module("tests.support.http_sink").HttpSink()) if NOTIFY else None
        rig_yaml = stack.enter_context(sim_rig(d, sides=("A",), routes=30))
        cfg = yaml.safe_load(rig_yaml.read_text())
        if sink is not None:
            cfg["notify"] = [sink.url]
        (tmpfs / "results").mkdir()   # the evaluator never creates the checkpoint's folder
        ev = cfg["sides"]["A"]["evaluator"]
        ev["checkpoint"], ev["log"] = str(tmpfs / "results" / "result.json"), str(tmpfs / "logs" / "eval.log")
        cfg["resources"] = {"disk_warning_mb": 16, "disk_critical_mb": 8}
        rig_yaml.write_text(yaml.safe_dump(cfg, sort_keys=False))

        assert cli(rig_yaml, "launch", "A", "--yes", timeout=120).returncode == 0
        cp_path = tmpfs / "results" / "result.json"

        def records() -> list[dict]:
            try:
                return done_records(json.loads(cp_path.read_text()))
            except (FileNotFoundError, ValueError):
                return []
        assert wait_until(lambda: len(records()) >= 2, 30)

        fill_to(tmpfs, 4)
        status = json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)
        fs = next(x for x in status["resources"]["disks"] if x["mount"] == str(tmpfs))
        assert fs["level"] == "CRITICAL" and fs["free_mb"] < 8
        assert f"A checkpoint {cp_path}" in fs["uses"]
        assert any(w.startswith(f"disk CRITICAL local:{tmpfs}") for w in status["resources"]["warnings"])

        before = [r["route_id"] for r in records()]
        subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), "A", "crash"],
                       cwd=REPO, check=True, capture_output=True)
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] in ("refused", "failed", "running")
                        and s["attempts"] and s["attempts"][0]["exit_code"] is not None and s, 60)
        assert st and st["status"] == "refused", harness_state(d, "A")
        assert st["attempt"] == 1 and len(st["attempts"]) == 1, "a new attempt started on a full disk"
        assert "disk below the critical floor (8 MiB)" in st["detail"] and f"local:{tmpfs} CRITICAL" in st["detail"]

        after = [r["route_id"] for r in records()]
        assert json.loads(cp_path.read_text())["_checkpoint"]["progress"], "checkpoint unreadable"
        assert after[:len(before)] == before, "a completed record was lost"

        alerts = [json.loads(line) for line in (d / "state" / "alerts.jsonl").read_text().splitlines()]
        assert any(a["kind"] == "disk-refused" and a["side"] == "A" and f"local:{tmpfs}" in a["body"] for a in alerts)
        if sink is not None:
            def names_fs(msgs: list[dict]) -> bool:
                return any(f"local:{tmpfs}" in json.dumps(m) for m in msgs)
            assert names_fs(sink.wait_for(names_fs, 20)), sink.snapshot()
        # A launch by hand is refused the same way.
        out = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        assert out.returncode == 3 and f"local:{tmpfs} CRITICAL" in json.loads(out.stdout)["refused"]
