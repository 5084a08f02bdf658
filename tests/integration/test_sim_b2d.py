"""The fake evaluator and fake conda behave like Bench2Drive 0.0.4 and conda 26.x where design.md §4 says
(issue 14): the two server modes, signals, exit codes, records, TM drift, buffering, the checkpoint folder.

Each test runs the fake evaluator of a one-side sim rig directly (no console), the way the real one runs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sim import rig
from sim.layout import SimLayout
from sim.procs import find_by_token
from tests.support.evalops_sim import wait_until


@pytest.fixture(scope="module")
def one_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimLayout, dict]]:
    d = tmp_path_factory.mktemp("b2d") / "rig"
    rig.up(d, sides=("A",), start_evaluators=False, routes=3)
    try:
        yield SimLayout.of(d), json.loads((d / "sim" / "sides.json").read_text())["sides"]["A"]
    finally:
        rig.down(d)


class Run:
    def __init__(self, one_side, tmp: Path, *extra: str, env: dict | None = None, route_s: float = 0.6) -> None:
        layout, st = one_side
        self.layout, self.work, self.port = layout, Path(st["work"]), st["rpc_port"]
        self.cp = tmp / "results" / "result.json"
        self.log = tmp / "eval.log"
        self.faults = tmp / "fault"
        self.argv = [sys.executable, str(self.work / "leaderboard_evaluator.py"), "--port", str(self.port),
                     "--traffic-manager-port", str(st["tm_port"]), "--routes", str(self.work / "routes.xml"),
                     "--checkpoint", str(self.cp), "--agent", "agent.py", "--timeout", "2", *extra]
        base = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        self.env = {**base, "CARLA_SIM_FAULTS": str(self.faults), "SIM_TICK_S": "0.05",
                    "SIM_ROUTE_S": str(route_s), "B2D_EXTERNAL_SERVER": "1", "PYTHONUNBUFFERED": "1",
                    **(env or {})}
        self.env = {k: v for k, v in self.env.items() if v is not None}
        self.proc: subprocess.Popen | None = None

    def start(self, mkdir: bool = True) -> Run:
        if mkdir:
            self.cp.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(self.argv, cwd=self.work, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
        return self

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def records(self) -> list[dict]:
        try:
            return json.loads(self.cp.read_text())["_checkpoint"]["records"]
        except (OSError, ValueError, KeyError):
            return []

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for r in made:
        r.stop()


def test_never_creates_the_checkpoint_folder(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path)
    runs.append(r)
    assert r.start(mkdir=False).wait() == 1
    assert "FileNotFoundError" in r.text() and not r.cp.parent.exists()


def test_sigint_ends_the_route_as_plain_failed_and_goes_on(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path, route_s=60)
    runs.append(r)
    r.start()
    assert wait_until(lambda: "step 2 " in r.text(), 15), r.text()
    r.proc.send_signal(signal.SIGINT)
    assert wait_until(lambda: r.records(), 10), r.text()
    assert r.records()[0]["status"] == "Failed" and r.records()[0]["index"] == 0
    assert wait_until(lambda: "Preparing RouteScenario" in r.text().split("Registering the route statistics")[-1], 5)
    assert r.proc.poll() is None                        # it went on with the next route


def test_agent_setup_failure_exits_255_and_resume_moves_past_it(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path)
    runs.append(r)
    r.faults.write_text("agent-setup")
    assert r.start().wait() == 255
    data = json.loads(r.cp.read_text())
    assert [x["status"] for x in data["_checkpoint"]["records"]] == ["Failed - Agent couldn't be set up"]
    assert data["entry_status"] == "Started" and data["_checkpoint"]["progress"] == [1, 3]
    again = Run(one_side, tmp_path, "--resume", "True", route_s=0.1)
    runs.append(again)
    assert again.start().wait() == 0
    assert "Resuming from route 1 of 3" in again.text()
    recs = json.loads(r.cp.read_text())["_checkpoint"]["records"]
    assert recs[0]["status"] == "Failed - Agent couldn't be set up"   # a permanent 0 under the real rule


def test_agent_setup_injected_mid_route_fails_the_next_routes_set_up(one_side, tmp_path, runs) -> None:
    # `sim inject SIDE agent-setup` lands while a route runs: the route on goes on, the next set-up fails.
    r = Run(one_side, tmp_path, route_s=60)
    runs.append(r)
    r.start()
    assert wait_until(lambda: "step 2 " in r.text(), 15), r.text()
    r.faults.write_text("agent-setup")
    assert wait_until(lambda: not r.faults.exists(), 10)          # taken by the running route's tick
    r.proc.send_signal(signal.SIGINT)                               # end that route now (plain Failed)
    assert r.proc.wait(timeout=30) == 255, r.text()
    statuses = [x["status"] for x in json.loads(r.cp.read_text())["_checkpoint"]["records"]]
    assert statuses == ["Failed", "Failed - Agent couldn't be set up"], statuses


def test_running_route_record_is_never_in_the_file(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path, route_s=0.8)
    runs.append(r)
    r.start()
    seen = []
    while r.proc.poll() is None:
        try:
            data = json.loads(r.cp.read_text())
        except (OSError, ValueError):
            continue
        seen.append((data["_checkpoint"]["progress"][0], [x["status"] for x in data["_checkpoint"]["records"]]))
    assert r.proc.returncode == 0
    assert all("Started" not in st and len(st) == done for done, st in seen), seen


def test_stdout_is_block_buffered_unless_unbuffered(one_side, tmp_path, runs) -> None:
    buffered = Run(one_side, tmp_path / "b", route_s=60, env={"PYTHONUNBUFFERED": None})
    (tmp_path / "b").mkdir()
    unbuffered = Run(one_side, tmp_path / "u", route_s=60, env={"PYTHONUNBUFFERED": "1"})
    (tmp_path / "u").mkdir()
    runs += [buffered, unbuffered]
    buffered.start()
    unbuffered.start()
    assert wait_until(lambda: "step 20 " in unbuffered.text(), 20)
    assert wait_until(lambda: "Running the route" in buffered.text(), 5)   # its flushed lines arrive
    assert "step 1 " not in buffered.text()                               # the tick lines wait in 8 KiB


def test_tm_port_drifts_to_the_next_free_one(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path, route_s=60)
    runs.append(r)
    tm = int(r.argv[r.argv.index("--traffic-manager-port") + 1])
    with __import__("socket").socket() as busy:
        busy.bind(("127.0.0.1", tm))
        busy.listen(1)
        r.start()
        p = psutil.Process(r.proc.pid)
        assert wait_until(lambda: [c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
                          == [tm + 1], 10), r.text()


def test_unpatched_evaluator_needs_carla_root(one_side, tmp_path, runs) -> None:
    r = Run(one_side, tmp_path, env={"B2D_EXTERNAL_SERVER": None, "CARLA_ROOT": None})
    runs.append(r)
    assert r.start().wait() == 1 and "KeyError: 'CARLA_ROOT'" in r.text()


def test_unpatched_evaluator_starts_its_own_server_past_the_external_one(one_side, tmp_path, runs) -> None:
    layout = one_side[0]
    env = {"B2D_EXTERNAL_SERVER": None, "CARLA_ROOT": str(layout.bin), "SIM_SERVER_WAIT_S": "0.3",
           "SIM_CONNECT_RETRY_S": "0.3"}
    r = Run(one_side, tmp_path, env=env, route_s=60)
    runs.append(r)
    own = f"-carla-rpc-port={r.port + 3}"              # N..N+2 held by the external server: N+3
    try:
        r.start()
        assert wait_until(lambda: "load_world success" in r.text(), 30), r.text()
        assert f"at localhost:{r.port + 3}" in r.text()
        servers = find_by_token(own)
        assert servers and all(os.getsid(p.pid) != os.getsid(r.proc.pid) for p in servers)   # a new session
        # SIGTERM: Python's default, atexit skipped → the evaluator's own server is orphaned.
        r.proc.terminate()
        assert r.wait(5) == -signal.SIGTERM
        assert all(p.is_running() for p in find_by_token(own))
    finally:
        for p in find_by_token(own):
            os.killpg(os.getsid(p.pid), signal.SIGKILL)
        wait_until(lambda: not find_by_token(own), 10)


def test_unpatched_evaluator_kills_its_server_group_at_exit(one_side, tmp_path, runs) -> None:
    layout = one_side[0]
    env = {"B2D_EXTERNAL_SERVER": None, "CARLA_ROOT": str(layout.bin), "SIM_SERVER_WAIT_S": "0.3",
           "SIM_CONNECT_RETRY_S": "0.3"}
    r = Run(one_side, tmp_path, env=env, route_s=0.1)
    runs.append(r)
    own = f"-carla-rpc-port={r.port + 3}"
    try:
        assert r.start().wait(60) == 0, r.text()
        assert wait_until(lambda: not find_by_token(own), 10)    # atexit: killpg(SIGKILL) of its server
    finally:
        for p in find_by_token(own):
            os.killpg(os.getsid(p.pid), signal.SIGKILL)


def test_status_shows_the_tm_port_the_evaluator_really_listens_on(tmp_path) -> None:
    import socket

    from tests.support.evalops_sim import cli, sim_rig
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",), route_s=60) as rig_yaml:
        tm = json.loads((d / "sim" / "sides.json").read_text())["sides"]["A"]["tm_port"]
        with socket.socket() as foreign:           # a foreign TrafficManager holds the planned TM port
            foreign.bind(("127.0.0.1", tm))
            foreign.listen(1)
            rig.start_evaluator(d, "A")

            def drift():
                out = cli(rig_yaml, "status", "--json", "--no-rpc")
                ev = json.loads(out.stdout)["sides"]["A"]["evaluator"]
                return ev["tm"]["drift"] and ev

            ev = wait_until(drift, 30, every=0.5)
            assert ev and ev["tm"] == {"planned": tm, "listening": [tm + 1], "error": None, "drift": True}
            text = cli(rig_yaml, "status", "--no-rpc").stdout
            assert f"tm{tm}->{tm + 1}!" in text and "TM port drift" in text
