"""Live results in `status --json` on the sim rig: ETA by town with what it rests on, DS/SR so far,
the fake-success flag from the side's `expect_wall_game_min` (the sim's model runs at 6x wall/game)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim import rig as sim
from sim.procs import wait_until

CLI = [sys.executable, "-m", "console"]


@pytest.fixture
def rig_dir(tmp_path: Path):
    d = tmp_path / "rig"
    sim.up(d, route_s=0.6, tick_s=0.2, stall_s=5.0)
    try:
        yield d
    finally:
        sim.down(d)


def status(cfg: Path) -> dict:
    out = subprocess.run([*CLI, "-c", str(cfg), "status", "--json", "--no-rpc"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_status_eta_ds_so_far_and_fake_success(rig_dir: Path) -> None:
    cfg = rig_dir / "rig.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["sides"]["A"]["expect_wall_game_min"] = 10.0   # the sim's model does 6x: flagged
    data["sides"]["B"]["expect_wall_game_min"] = 2.0    # under 6x: fine
    cfg.write_text(yaml.safe_dump(data))
    seen: dict = {}

    def two_routes_done() -> bool:
        seen.update(status(cfg))
        return all((seen["sides"][s]["results"] or {}).get("recorded", 0) >= 2 for s in ("A", "B"))

    assert wait_until(two_routes_done, timeout_s=90, interval_s=0.5), seen
    for name in ("A", "B"):
        side = seen["sides"][name]
        res = side["results"]
        assert side["eta_routes"] == res["recorded"] >= 2      # the done routes it rests on
        assert res["eta_left"] == 10 - res["recorded"]
        if res["eta_left"]:
            assert side["eta_s"] > 0
        assert 0 <= res["ds_so_far"] <= 100 and 0 <= res["sr_so_far"] <= 1
    assert seen["sides"]["A"]["results"]["fake_success"]["flagged"] is True
    assert seen["sides"]["B"]["results"]["fake_success"]["flagged"] is False
    assert seen["eta"]["rests_on"] >= 4 and seen["eta"]["eta_s"] is not None
    # The sim rewrites its checkpoint in place every route, as the real evaluator does: a status that
    # reads it mid-rewrite has no results for that side this once. Wait for a status that read both.
    outs: list[str] = []

    def human_with_results() -> bool:
        human = subprocess.run([*CLI, "-c", str(cfg), "status", "--no-rpc"], capture_output=True, text=True,
                               timeout=60)
        assert human.returncode == 0, human.stderr
        outs.append(human.stdout)
        return "A: DS " in human.stdout and "B: DS " in human.stdout
    assert wait_until(human_with_results, timeout_s=60, interval_s=0.2), outs[-1:]
    out = outs[-1]
    assert "SR " in out and "A: FAKE SUCCESS?" in out
    assert "B: FAKE SUCCESS?" not in out
