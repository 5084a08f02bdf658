"""End to end: the real `carla-console` entry point in tmux against a sim rig. A hang is injected on
side A; the recovery is driven from keys (r, Tab Tab Enter twice) to a FRESH heartbeat, reading the
screen with `tmux capture-pane -p` only, as an operator would.

Teardown stops exactly what the test started: the tmux server by its pid (the console gets SIGHUP and
must exit by itself), the harness the recovery launched by its recorded (pid, create time), and the sim
rig with down().
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.tmux_driver import Tmux

pytestmark = [pytest.mark.tmux, pytest.mark.timeout(240)]

TMUX = shutil.which("tmux")
EVERY_S = 0.25   # between screen reads: the console under test shares 2 cores with tmux
ENTRY = Path(sys.executable).with_name("carla-console")
W, H = 120, 40


def left_beat(text: str) -> str:
    """Side A's heartbeat line: A is the left pane at 120 columns."""
    for line in text.splitlines():
        if "beat" in line and "stall" in line:
            return line[: W // 2]
    return ""


def stop_harnesses(state_dir: Path) -> None:
    """The harness a recovery launched runs detached (own session): stop it and its children by the
    (pid, create time) it recorded, never by name."""
    for f in state_dir.glob("sides/*/harness.json"):
        try:
            st = json.loads(f.read_text())
            proc = psutil.Process(int(st["pid"]))
        except (OSError, ValueError, KeyError, psutil.NoSuchProcess):
            continue
        if abs(proc.create_time() - float(st["create_time"])) > 0.05:
            continue
        procs = [proc, *proc.children(recursive=True)]
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=3)


def _where(proc: psutil.Process) -> str:
    """Where a console that would not exit is stuck: its threads' kernel waits, and py-spy where present."""
    lines = []
    try:
        lines.append(f"status {proc.status()}, children {[c.pid for c in proc.children()]}")
        for task in sorted(os.listdir(f"/proc/{proc.pid}/task")):
            with open(f"/proc/{proc.pid}/task/{task}/wchan") as f:
                wchan = f.read()
            with open(f"/proc/{proc.pid}/task/{task}/comm") as f:
                comm = f.read().strip()
            lines.append(f"thread {task} {comm}: {wchan}")
    except (OSError, psutil.Error) as e:
        lines.append(f"({e})")
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if os.path.exists(spy):
        out = subprocess.run([spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=30)
        lines.append(out.stdout[-6000:])
    return "\n".join(lines)


def _wait_exit(proc: psutil.Process, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(TMUX is None, reason="tmux not installed")
def test_hang_recovered_from_keys_in_tmux(tmp_path: Path) -> None:
    from sim import rig as sim

    rig_dir = tmp_path / "rig"
    tmux = Tmux("e2e", W, H, every=EVERY_S)
    rig_yaml = sim.up(rig_dir)
    try:
        # COLUMNS/LINES from the test's environment would override the pane's real size.
        tmux.start(["env", "-u", "COLUMNS", "-u", "LINES", str(ENTRY), "-c", str(rig_yaml)])
        first = tmux.wait(lambda t: "FRESH" in left_beat(t) and "ALIVE" in t, 30, "side A FRESH")
        assert "hosts local reachable" in first
        sim.inject(rig_dir, "A", "hang")
        tmux.wait(lambda t: "STALE" in left_beat(t), 40, "side A STALE")

        tmux.keys("r")
        modal = tmux.wait(lambda t: "stop the hung chain" in t and "Proceed" in t, 30, "the kill modal")
        assert "evaluator" in modal and "Cancel" in modal
        tmux.keys("Tab", "Tab", "Enter")
        tmux.wait(lambda t: "relaunch · side A" in t and "Proceed" in t, 60, "the relaunch modal")
        tmux.keys("Tab", "Tab", "Enter")
        done = tmux.wait(lambda t: "recovered: heartbeat FRESH" in t or "[FAIL]" in t or "[STOP]" in t, 90,
                         "the wizard's end")
        assert "recovered: heartbeat FRESH" in done, done
        assert done.count("[ ok ]") == 7
        tmux.keys("Escape")
        main = tmux.wait(lambda t: "FRESH" in left_beat(t) and "stop-chain done" in t, 30, "A FRESH again")
        assert "launch done" in main
    finally:
        app = tmux.pane if tmux.pane is not None and tmux.pane.is_running() else None
        if tmux.server is not None:
            try:
                os.kill(tmux.server.pid, signal.SIGTERM)   # the pane's console gets SIGHUP
            except ProcessLookupError:
                pass
        exited, stuck = True, ""
        if app is not None:
            # It exits by itself on SIGHUP, touching no run. Its parent (the tmux server) is gone, and this
            # container's PID 1 never reaps orphans: an exited console stays a zombie, which counts as exited.
            exited = _wait_exit(app, 15)
            if not exited:
                stuck = _where(app)
                app.kill()
        stop_harnesses(rig_dir / "state")
        sim.down(rig_dir)
    assert exited, f"the console did not exit on SIGHUP:\n{stuck}"


@pytest.mark.skipif(TMUX is None, reason="tmux not installed")
def test_demo_comes_up_runs_both_sides_and_cleans_up_on_quit(tmp_path: Path) -> None:
    """The README's first command: `carla-console --demo` starts its own sim rig, launches both sides
    through the guard, and on `q` stops exactly what it started and removes its directory."""
    from sim import rig as sim

    tmux = Tmux("demo", W, H, every=EVERY_S)
    # TMPDIR puts the demo's directory under tmp_path, where the test can find it (and clean up after a
    # failure by the pids the demo recorded).
    tmux.start(["env", "-u", "COLUMNS", "-u", "LINES", f"TMPDIR={tmp_path}", str(ENTRY), "--demo"])
    app = tmux.pane
    try:
        # The event log is fed from the audit trail once a second: wait for its lines too.
        # Counted in the panes (a line that starts at a border): the event log may name the words too.
        up = tmux.wait(lambda t: len(re.findall(r"[║│] server ALIVE", t)) == 2 and t.count("eval   ALIVE running") == 2
                       and "A launch done" in t and "B launch done" in t, 120, "both demo sides running")
        assert up.count("FRESH") >= 2, up
        demo_dirs = list(tmp_path.glob("carla-console-demo-*"))
        assert len(demo_dirs) == 1
        tmux.keys("q")
        assert app is not None and _wait_exit(app, 30), "the demo did not exit on q"
        assert not list(tmp_path.glob("carla-console-demo-*")), "the demo left its directory behind"
    finally:
        for d in tmp_path.glob("carla-console-demo-*"):
            stop_harnesses(d / "state")
            sim.down(d)
        if app is not None and app.is_running():
            with contextlib.suppress(psutil.NoSuchProcess):
                app.kill()
        if tmux.server is not None:
            try:
                os.kill(tmux.server.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
