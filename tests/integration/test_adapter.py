"""Adapter polling on the sim rig: adapter 2 crashes, 0 renders (+6000 MiB), 1 starts but renders nothing.

Every test checks that no server of a failed try is left running: the only processes with the side's
`-carla-rpc-port=N` token afterwards are the accepted launch's (or none).
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml

from console.cli.main import main
from console.tui.audit_fold import AuditFold
from ops.actions.adapter import ACCEPTED, CRASHED, NO_RISE, VRAM_UNKNOWN, poll_adapters
from ops.actions.guard import Confirmation
from ops.config import load_config
from ops.platform.procs import LocalProcScanner
from ops.probes.adapter_record import read_record
from ops.probes.server import rpc_marker
from ops.rig import open_rig
from sim import rig as sim
from sim.layout import SimLayout
from widgets.event_log import audit_text


def _configure(rig_yaml: Path, side: str, candidates: list[int], start_wait_s: float = 1.5) -> None:
    data = yaml.safe_load(rig_yaml.read_text())
    data["sides"][side]["server"].update(adapter_candidates=candidates, start_wait_s=start_wait_s)
    rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def rig_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("simadapter")
    sim.up(d, sides=("A", "B"), start_evaluators=False)
    try:
        yield d
    finally:
        sim.down(d)


@pytest.fixture
def dead_b(rig_dir):
    """Side B with its server stopped (adapter polling needs it DEAD); whatever a test started is stopped."""
    layout = SimLayout.of(rig_dir)
    port = load_config(rig_dir / "rig.yaml").sides["B"].server.rpc_port
    if marker_procs(port):
        sim.inject(rig_dir, "B", "server-crash")
    assert sim.wait_for(lambda: not marker_procs(port), 5.0)
    layout.nvsmi_mode.unlink(missing_ok=True)
    yield port
    layout.nvsmi_mode.unlink(missing_ok=True)


def marker_procs(port: int) -> list:
    table = LocalProcScanner().scan()
    return sorted((p for p in table.procs.values() if p.has_token(rpc_marker(port)) and p.state != "Z"),
                  key=lambda p: p.create_time)


def audit(rig_dir: Path) -> list[dict]:
    path = SimLayout.of(rig_dir).state / "audit.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


# The sim's crashing adapter dies about 1 s after its server starts, after the interpreter's own start-up:
# on a loaded machine that is past 1.5 s, and a try still running at the end of start_wait_s is judged on
# VRAM (no rise), not as a crash. A test that expects CRASHED gives the crash room (the watch ends as soon
# as the launch exits, so only the tries that live wait the whole of it).
CRASH_ROOM_S = 6.0


def test_candidates_2_0_1_pick_0(capsys, rig_dir, dead_b) -> None:
    _configure(rig_dir / "rig.yaml", "B", [2, 0, 1], start_wait_s=CRASH_ROOM_S)
    n_audit = len(audit(rig_dir))
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "adapter", "B", "--yes", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0, report
    assert [(t["adapter"], t["verdict"]) for t in report["tries"]] == [(2, CRASHED), (0, ACCEPTED)]
    good = report["tries"][1]
    assert good["delta_mb"] >= 4096 and good["gpu_name"] == "NVIDIA H200"
    assert good["baseline_mb"]["0"] is not None and good["after_mb"]["0"] - good["baseline_mb"]["0"] == good["delta_mb"]
    # Only the accepted launch (launcher + shipping server) carries the port marker now.
    left = marker_procs(dead_b)
    assert {p.pid for p in left} == {good["pid"], good["server_pid"]}
    assert all("-graphicsadapter=0" in p.cmdline for p in left)
    rec = read_record(load_config(rig_dir / "rig.yaml"), "B")
    assert rec["adapter"] == 0 and rec["gpu_name"] == "NVIDIA H200" and rec["server_pid"] == good["server_pid"]
    ops = [(a["operation"], a["outcome"]) for a in audit(rig_dir)[n_audit:]]
    assert ops == [("adapter-launch", "launched"), ("adapter-try", CRASHED),
                   ("adapter-launch", "launched"), ("adapter-try", ACCEPTED), ("adapter-poll", "done")]
    # The event log shows the accepted polling as ONE timed line, naming the try before it (issue 17).
    (line,) = AuditFold().lines(audit(rig_dir)[n_audit:], time.time())
    text = audit_text(line).plain
    assert "B adapter-poll done" in text and "adapter 0 accepted" in text and "2 crashed" in text, text


def test_idle_adapter_is_stopped_and_none_found(capsys, rig_dir, dead_b) -> None:
    _configure(rig_dir / "rig.yaml", "B", [1])
    n_audit = len(audit(rig_dir))
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "adapter", "B", "--yes", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1
    (t,) = report["tries"]
    assert t["verdict"] == NO_RISE and t["delta_mb"] == 0 and "terminated" in t["stopped"]
    assert marker_procs(dead_b) == []
    stop = [a for a in audit(rig_dir)[n_audit:] if a["operation"] == "stop-own-launch"]
    # One plan: its "started" line (written before the first signal), then its "done" line.
    assert [a["outcome"] for a in stop] == ["started", "done"]
    stop = stop[1:]
    assert [x["pid"] for x in stop[0]["targets"]][0] == t["pid"]          # the launcher first (outer → inner)
    # In the event log: one line for the stop of the launch, one for the polling's result.
    shown = AuditFold().lines(audit(rig_dir)[n_audit:], time.time())
    assert [(a["operation"], a["outcome"]) for a in shown] == [("stop-own-launch", "done"), ("adapter-poll", "failed")]


@pytest.mark.parametrize("mode", ["na", "fail"])
def test_vram_unreadable_before_polling_refuses(capsys, rig_dir, dead_b, mode) -> None:
    _configure(rig_dir / "rig.yaml", "B", [2, 0, 1])
    SimLayout.of(rig_dir).nvsmi_mode.write_text(mode + "\n")
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "adapter", "B", "--yes", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 3 and report["tries"] == [] and report["plan"]["verdicts"]["vram"] == "UNKNOWN"
    assert "UNKNOWN" in report["refused"]
    assert marker_procs(dead_b) == []


def test_vram_unreadable_after_the_launch_stops_it(rig_dir, dead_b) -> None:
    _configure(rig_dir / "rig.yaml", "B", [0, 1])
    mode = SimLayout.of(rig_dir).nvsmi_mode
    events = []

    def on_event(ev) -> None:
        events.append(ev)
        if ev.kind == "launched":
            mode.write_text("fail\n")       # the driver goes away while the server starts

    async def go():
        async with open_rig(load_config(rig_dir / "rig.yaml")) as live:
            return await poll_adapters(live, "B", Confirmation(True, "test", typed="B"), on_event=on_event)

    report = asyncio.run(go())
    assert report.exit_code == 3 and report.stopped_on == VRAM_UNKNOWN
    (t,) = report.tries                                 # polling stopped: adapter 1 never tried
    assert t.adapter == 0 and t.verdict == VRAM_UNKNOWN and t.stopped and "terminated" in t.stopped
    assert marker_procs(dead_b) == []
    assert [e.kind for e in events][:3] == ["baseline", "launched", "watching"]


def test_adapter_refuses_while_the_server_runs(capsys, rig_dir) -> None:
    port = load_config(rig_dir / "rig.yaml").sides["A"].server.rpc_port
    before = {p.key for p in marker_procs(port)}
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "adapter", "A", "--yes", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 3 and report["tries"] == [] and "server" in report["refused"]
    assert {p.key for p in marker_procs(port)} == before
