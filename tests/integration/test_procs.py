"""The local scanner's cache: watched processes show their state and parent as they are now."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from ops.platform import procs
from ops.platform.procs import LocalProcScanner
from sim.procs import wait_gone, wait_until


@pytest.fixture
def settled(monkeypatch):
    # Every process counts as settled at once: the re-read of a watched one is what is under test,
    # not the young-process rule (which re-reads everything for its first two seconds).
    monkeypatch.setattr(procs, "_SETTLE_S", 0.0)


def test_a_watched_process_that_exits_shows_as_a_zombie_at_once(settled) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        scanner = LocalProcScanner()
        first = scanner.scan(frozenset({child.pid})).procs[child.pid]
        assert first.state in ("S", "R") and "time.sleep(60)" in " ".join(first.cmdline)
        os.kill(child.pid, signal.SIGKILL)
        assert wait_until(lambda: procs.read_proc(child.pid).state == "Z", 10)   # exited, not reaped
        assert scanner.scan().procs[child.pid].state == first.state     # unwatched: the cached facts
        now = scanner.scan(frozenset({child.pid})).procs[child.pid]
        assert now.state == "Z"
        assert (now.pid, now.create_time, now.cmdline) == (first.pid, first.create_time, first.cmdline)
    finally:
        child.kill()
        child.wait()


def test_a_watched_process_shows_its_new_parent_and_is_the_same_object_while_nothing_moves(settled) -> None:
    # A middle process starts a grandchild and exits: the grandchild is re-parented (to init or to a
    # subreaper), and a watched one must show that parent on the next scan.
    # The middle process stays until told (its stdin closes), and the grandchild is first seen asleep:
    # before, the middle could exit (re-parenting the grandchild) or the grandchild still be starting
    # Python (R, then S) between the two scans below, and a scan then rightly made a new object.
    middle = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
                               "'import time; time.sleep(60)']); print(p.pid, flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    grandchild = int(middle.stdout.readline())
    try:
        assert wait_until(lambda: (g := procs.read_proc(grandchild)) is not None and g.state == "S"
                          and "time.sleep(60)" in " ".join(g.cmdline or ()), 30)
        scanner = LocalProcScanner()
        before = scanner.scan(frozenset({grandchild})).procs[grandchild]
        again = scanner.scan(frozenset({grandchild})).procs[grandchild]
        assert again is before                           # nothing moved: no new object, tokens kept
        middle.stdin.close()
        middle.wait(timeout=10)
        assert wait_until(lambda: procs.read_proc(grandchild).ppid != middle.pid, 10)
        after = scanner.scan(frozenset({grandchild})).procs[grandchild]
        assert before.ppid == middle.pid and after.ppid == procs.read_proc(grandchild).ppid != middle.pid
        assert after.cmdline == before.cmdline
    finally:
        try:
            gp = psutil.Process(grandchild)
            gp.kill()
            assert wait_gone([gp], 10) == []    # an orphan's zombie counts as gone: PID 1 reaps it
        except psutil.NoSuchProcess:
            pass
        middle.wait(timeout=10)


def test_a_watched_process_that_is_gone_leaves_the_table(settled) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    scanner = LocalProcScanner()
    assert child.pid in scanner.scan(frozenset({child.pid})).procs
    child.kill()
    child.wait()
    assert child.pid not in scanner.scan(frozenset({child.pid})).procs
