"""reclaim on the sim rig: B finishes (server stays up → IDLE) and reclaim stops exactly B's server; a busy
side, a connected client and an UNKNOWN all refuse."""
from __future__ import annotations

import asyncio
import json
import socket

import pytest

from console.cli.main import main
from ops.actions.reclaim import plan_reclaim
from ops.config import load_config
from ops.platform.procs import read_proc
from ops.rig import open_rig
from sim import rig as sim
from tests.support.session import marked_processes


def session_processes() -> set[tuple[int, float]]:
    """(pid, create time) of every live process this test session started (conftest's env mark)."""
    return {p.key for pid in marked_processes() if (p := read_proc(pid)) is not None and p.state != "Z"}


def snapshot(rig_yaml, side: str):
    async def go():
        async with open_rig(load_config(rig_yaml)) as live:
            return await live.prober.side(side, rpc=True)
    return asyncio.run(go())


def plan(rig_yaml, side: str):
    async def go():
        async with open_rig(load_config(rig_yaml)) as live:
            return await plan_reclaim(live, side)
    return asyncio.run(go())


@pytest.fixture(scope="module")
def rig_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("simreclaim")
    sim.up(d, sides=("A", "B"), route_s=1.0, routes=60)
    try:
        sim.inject(d, "B", "finish")
        assert sim.wait_for(lambda: snapshot(d / "rig.yaml", "B").idle, 20.0), "side B never became IDLE"
        yield d
    finally:
        sim.down(d)


def test_busy_side_is_refused_and_untouched(capsys, rig_dir) -> None:
    snap = snapshot(rig_dir / "rig.yaml", "A")
    keys = {p.key for p in snap.server.procs} | {m.proc.key for m in snap.evaluator.chain.members}
    assert len(keys) >= 3
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "reclaim", "A", "--yes", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and "evaluator" in out["refused"] and out["targets"] == []
    assert out["plan"]["verdicts"]["evaluator"] == "ALIVE"
    # A's server and evaluator chain all still there. Read again for a moment if one is missing: a read of
    # /proc/PID/environ can fail while processes of other tests come and go; a process we stopped stays gone.
    assert sim.wait_for(lambda: keys <= session_processes(), 5.0), \
        [(k, read_proc(k[0])) for k in keys - session_processes()]


def test_a_connected_client_refuses(rig_dir) -> None:
    port = load_config(rig_dir / "rig.yaml").sides["B"].server.rpc_port
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        p = plan(rig_dir / "rig.yaml", "B")
    assert p.verdicts["clients"] == "SOME" and not p.allowed and "clients" in p.refused


def test_without_tty_and_without_yes_refuses(capsys, rig_dir, monkeypatch) -> None:
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    rc = main(["-c", str(rig_dir / "rig.yaml"), "reclaim", "B"])
    assert rc == 3 and "not confirmed" in capsys.readouterr().out


def test_reclaim_stops_exactly_the_idle_server(capsys, rig_dir) -> None:
    p = plan(rig_dir / "rig.yaml", "B")
    assert p.allowed, p.refused
    assert [t.role for t in p.targets] == ["launcher", "server"]
    targets = {(t.pid, round(t.create_time, 2)) for t in p.targets}
    before = session_processes()
    assert targets <= before
    capsys.readouterr()
    rc = main(["-c", str(rig_dir / "rig.yaml"), "reclaim", "B", "--yes", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert [t["outcome"] for t in out["targets"]] == ["terminated", "terminated"]
    gone = before - session_processes()
    assert gone == targets                      # that server, and no other process
    # DEAD needs positive evidence (no process with the marker, the port refused): on a loaded machine one
    # probe can miss it (a connect that times out is UNKNOWN), so the side is probed until it reads DEAD.
    seen: list = []

    def dead() -> bool:
        seen[:] = [snapshot(rig_dir / "rig.yaml", "B")]
        return seen[0].server.verdict.state.value == "DEAD"
    assert sim.wait_for(dead, 20.0), [e.line() for e in seen[0].server.verdict.evidence]
    assert not seen[0].idle
    assert snapshot(rig_dir / "rig.yaml", "A").server.verdict.state.value == "ALIVE"
