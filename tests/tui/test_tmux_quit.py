"""Quitting leaves nothing behind on the terminal (issue 16, class 7): 6 quits of the real console in tmux,
each while its polls run their probes, and not one line of `_GatheringFuture exception was never
retrieved ... CancelledError` (or any other traceback) on stderr. Before the fix, 2 quits of 6 printed it:
a reader gather cancelled on quit was never retrieved (ops/platform/common.py `settled`)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.evalops_sim import sim_rig
from tests.support.tmux_driver import Tmux
from tests.tui.test_tmux_e2e import ENTRY, EVERY_S, H, W, _wait_exit

pytestmark = [pytest.mark.tmux, pytest.mark.timeout(400)]
QUITS = 6


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_six_quits_print_nothing_but_the_console(tmp_path: Path) -> None:
    with sim_rig(tmp_path / "rig") as rig_yaml:
        for i in range(QUITS):
            tmux = Tmux(f"quit{i}", W, H, every=EVERY_S)
            tmux.start(["env", "-u", "COLUMNS", "-u", "LINES", str(ENTRY), "-c", str(rig_yaml)])
            app = tmux.pane
            text = ""
            try:
                # Quit once both panes show a server verdict: the polls (process scans, nvidia-smi, the
                # carla probe under conda) are running then, so a quit cancels commands mid-read.
                tmux.wait(lambda t: t.count("server ALIVE") >= 2, 60, "both servers shown")
                tmux.keys("q")
                assert app is not None and _wait_exit(app, 30), f"quit {i}: the console did not exit on q"
                # The app has left the alternate screen: what it (or asyncio, at loop close) wrote to the
                # terminal after that stays in the pane (remain-on-exit), with its history.
                assert tmux.wait_dead(30)
                text = tmux.cmd("capture-pane", "-p", "-S", "-", "-t", "b")
            finally:
                if app is not None and app.is_running():
                    with contextlib.suppress(psutil.NoSuchProcess):
                        app.kill()
                if tmux.server is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(tmux.server.pid, signal.SIGTERM)
            assert "never retrieved" not in text and "Traceback" not in text, f"quit {i} printed:\n{text}"
