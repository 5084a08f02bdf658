"""`h` on a real rig (Pilot, the live backend, the sim): a server hung by the sim's `server-hang` (process
and port up, RPC silent), measured by the real carla client. One forced probe is a first silence (UNKNOWN:
Proceed disabled); Re-probe measures again after T s (HUNG: Proceed enabled); Proceed stops exactly that
server's processes through the guard and restarts it by adapter polling. The other side is not touched.
"""
from __future__ import annotations

import json
import time

import yaml
from textual.widgets import Button

from console.tui.app import ConsoleApp
from console.tui.backend import LiveBackend
from console.tui.screens.confirm import ConfirmScreen
from ops.config import load_config
from ops.platform.procs import LocalProcScanner
from ops.probes.server import rpc_marker
from sim import rig as sim
from tests.support.evalops_sim import sim_rig
from widgets.event_log import EventLog

HUNG_CFG = {"hung_probes": 2, "hung_after_s": 1.0, "probe_timeout_s": 1.5, "adapter_candidates": [0],
            "start_wait_s": 1.5}


def marker_pids(port: int) -> set[tuple[int, float]]:
    table = LocalProcScanner().scan()
    return {(p.pid, p.create_time) for p in table.procs.values() if p.has_token(rpc_marker(port)) and p.state != "Z"}


def audit_ops(d) -> list[tuple[str, str]]:
    path = d / "state" / "audit.jsonl"
    if not path.exists():
        return []
    return [(a["operation"], a["outcome"]) for a in map(json.loads, path.read_text().splitlines())]


async def until(pilot, cond, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.1)


async def test_h_stops_and_restarts_a_hung_sim_server(tmp_path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, routes=10) as rig_yaml:
        data = yaml.safe_load(rig_yaml.read_text())
        data["sides"]["A"]["server"].update(HUNG_CFG)
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        rig = load_config(rig_yaml)
        port_a, port_b = rig.sides["A"].server.rpc_port, rig.sides["B"].server.rpc_port
        hung_before, b_before = marker_pids(port_a), marker_pids(port_b)
        assert hung_before and b_before
        sim.inject(d, "A", "server-hang")
        backend = LiveBackend(rig)
        app = ConsoleApp(backend, poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: backend.live is not None, "the rig opened")
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.plan is not None, "a plan")
            screen = app.screen
            assert isinstance(screen, ConfirmScreen)
            first = screen.plan
            assert first is not None
            if first.verdicts["server"] != "HUNG":
                # One silent probe is not a measurement of a hang: nothing may be stopped on it.
                assert first.verdicts["server"] == "UNKNOWN" and screen.query_one("#proceed", Button).disabled
                for _ in range(10):   # each Re-probe is one more forced rpc probe; HUNG needs T s between
                    plan = screen.plan
                    if plan is not None and plan.verdicts["server"] == "HUNG":
                        break
                    screen.query_one("#reprobe", Button).press()
                    await until(pilot, lambda: screen.plan is not None and screen.plan is not plan, "a new plan")
            plan = screen.plan
            assert plan is not None and plan.verdicts["server"] == "HUNG", plan and plan.verdicts
            assert {(t.pid, t.create_time) for t in plan.targets} <= hung_before
            await until(pilot, lambda: not screen.query_one("#proceed", Button).disabled, "Proceed enabled")
            screen.query_one("#proceed", Button).press()
            await until(pilot, lambda: app.screen.id == "main" and any(
                op == "adapter-poll" for op, _ in audit_ops(d)), "the restart", timeout_s=120)
            ops = audit_ops(d)
            assert ("stop-hung-server", "done") in ops and ("adapter-poll", "done") in ops, ops
            now_a = marker_pids(port_a)
            assert now_a and not (now_a & hung_before), "the hung server's processes are still there"
            assert marker_pids(port_b) == b_before, "the other side's server was touched"
            app.feed_audit()
            await pilot.pause(0.2)
            lines = [s.text for s in app.main.query_one(EventLog).lines]
            assert len([ln for ln in lines if "stop-hung-server done" in ln]) == 1, lines
