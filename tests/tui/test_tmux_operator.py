"""End to end, issue 17: the real `carla-console` in tmux at 80x24 and at 120x40 on a sim rig whose sides
run under real harnesses, read with `tmux capture-pane` only, as an operator reads the screen.

B is finished (`sim inject finish`), then `l` on B is refused with the reason; A's evaluator crashes (the
event log shows the exit code the harness recorded), then hangs (the log shows STALE); `r` opens the kill
plan, whose rows show the side's tokens (`--port N`) even at 80 columns; Esc cancels the modal, and `q`
quits from the recovery screen. Teardown stops exactly what the test started (harnesses by their recorded
pid and create time, then `sim down`).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.evalops_sim import sim_rig
from tests.support.tmux_driver import Tmux

pytestmark = [pytest.mark.tmux, pytest.mark.timeout(240)]

TMUX = shutil.which("tmux")
ENTRY = Path(sys.executable).with_name("carla-console")


def flat(screen: str) -> str:
    """The screen as one line of words: a wrapped log line reads whole."""
    return " ".join(screen.split())


def a_beat(screen: str, width: int) -> str:
    """Side A's heartbeat line: the first pane (the top one at 80 columns, the left one at 120)."""
    for line in screen.splitlines():
        if "beat   [" in line:
            return line[: width // 2] if width >= 100 else line
    return ""


def wait_logged(tmux: Tmux, pred, timeout: float, what: str, size: tuple[int, int]) -> None:
    """Wait for an event-log line. At 80x24 the log shows four rows, and a supervisor's needs-human line
    (four rows wrapped) can push a line out of sight before a capture sees it: every screen since the
    wait began counts, and failing that a taller terminal reads the log back."""
    seen: list[str] = []
    try:
        tmux.wait(lambda t: seen.append(flat(t)) is None and any(pred(x) for x in seen), timeout, what)
    except TimeoutError:
        w, h = size
        tmux.resize(w, 60)
        try:
            tmux.wait(lambda t: pred(flat(t)), 30, f"{what}, read back in a taller terminal")
        finally:
            tmux.resize(w, h)


def launch(rig_yaml: Path, side: str) -> None:
    from tests.support.evalops_sim import cli
    res = cli(rig_yaml, "launch", side, "--yes")
    assert res.returncode == 0, res.stderr + res.stdout


def inject(d: Path, side: str, fault: str) -> None:
    from sim import rig as sim
    sim.inject(d, side, fault)


@pytest.mark.skipif(TMUX is None, reason="tmux not installed")
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_story_kill_plan_tokens_refused_launch_and_q_from_recovery(tmp_path: Path, size: tuple[int, int]) -> None:
    d = tmp_path / "sim"
    w, h = size
    with sim_rig(d, route_s=6.0, routes=40, stall_s=4.0, tick_s=0.3) as rig_yaml:
        launch(rig_yaml, "A")
        launch(rig_yaml, "B")
        tmux = Tmux(f"op{w}", w, h, every=0.25)
        try:
            tmux.start(["env", "-u", "COLUMNS", "-u", "LINES", str(ENTRY), "-c", str(rig_yaml)])
            tmux.wait(lambda t: t.count("FRESH") >= 1, 60, "the console up")
            wait_logged(tmux, lambda t: "first look" in t, 30, "the first-look lines", size)

            # B finishes: a launch on it is refused, with the reason, before any plan.
            inject(d, "B", "finish")
            wait_logged(tmux, lambda t: "B evaluator finished" in t, 60, "B's finish in the event log", size)
            tmux.keys("Tab")
            tmux.keys("l")
            refused = tmux.wait(lambda t: "B launch refused" in flat(t), 30, "B's launch refused")
            assert "finished" in flat(refused).split("B launch refused", 1)[1][:200]
            tmux.keys("Tab")   # back to A

            # A crashes: the harness restarts it; the log says which attempt ended, with its exit code.
            inject(d, "A", "crash")
            wait_logged(tmux, lambda t: re.search(r"A evaluator attempt 1 exited: exit code [1-9]", t) is not None,
                        60, "A's exit-code line", size)

            # A hangs: STALE in the event log, then the kill plan shows the side's tokens.
            tmux.wait(lambda t: "eval   ALIVE running  attempt 2/" in t, 60, "A's attempt 2 running")
            wait_logged(tmux, lambda t: "A evaluator running: pid" in t.split("exit code", 1)[-1], 30,
                        "A's attempt 2 in the event log", size)
            # The log is quiet while the harness restarts (a STALE line may be there already): wait for A's
            # beat to be FRESH again, then hang it and wait for its pane and its event-log line.
            tmux.wait(lambda t: "FRESH" in a_beat(t, w), 60, "A FRESH on attempt 2")
            inject(d, "A", "hang")
            tmux.wait(lambda t: "STALE" in a_beat(t, w), 60, "A STALE in its pane")
            wait_logged(tmux, lambda t: "A heartbeat STALE" in t, 30, "A's STALE line", size)
            tmux.keys("r")
            modal = tmux.wait(lambda t: "stop the hung chain" in t and "Proceed" in t and "--port" in t, 60,
                              "the kill modal with the side's tokens")
            port = json.loads((d / "sim" / "sides.json").read_text())["sides"]["A"]["rpc_port"]
            assert f"--port {port}" in flat(modal), modal
            tmux.keys("Escape")                       # cancels the modal: the wizard says so
            tmux.wait(lambda t: "Recovery of side A" in t and "[STOP]" in t, 30, "the wizard, cancelled")
            tmux.keys("q")                            # q quits from the recovery screen
            assert tmux.wait_dead(30), tmux.screen()
        finally:
            tmux.stop()
