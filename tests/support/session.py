"""The test session's processes: found by the mark conftest puts in every test process's environment.

Here, not in conftest.py: a module that imported conftest by another name (`tests.conftest`) would run it
again and set a second mark, and every process started afterwards would escape the leak check.
"""
from __future__ import annotations

import os
import signal

from ops.platform.procs import stat_state
from sim.procs import wait_until

MARK_VAR = "CARLA_CONSOLE_TEST_SESSION"


def marked_processes(mark: str | None = None) -> list[int]:
    """Live (non-zombie) processes whose environment carries the mark (this session's by default)."""
    needle = f"{MARK_VAR}={os.environ[MARK_VAR] if mark is None else mark}".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = stat_state(f.read().rsplit(b")", 1)[1].split())
        except OSError:
            continue
        if state != "Z" and needle in env.split(b"\0"):
            found.append(int(name))
    return found


def reap(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 3):
            return
