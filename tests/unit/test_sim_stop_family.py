"""sim.procs.stop_family: a family that keeps forking is stopped whole.

A CI run left an evaluator behind: the test's teardown stopped a harness whose `conda run` forked the
evaluator just after the descendants were read, and conda forwards no signal. Freezing each process
before reading its children closes that window; a parent that forks every few milliseconds shows it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psutil

from sim.procs import stop_family, wait_until
from tests.support.session import MARK_VAR, marked_processes, reap

# Forks as fast as Popen allows (a few hundred children at most), then waits on its stdin.
FORKER = """
import subprocess, sys
sys.stdout.write("up\\n"); sys.stdout.flush()
for _ in range(300):
    subprocess.Popen(["sleep", "60"])
sys.stdin.read()
"""


def test_a_parent_that_keeps_forking_leaves_no_child_behind() -> None:
    mark = f"stop-family-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, MARK_VAR: mark}
    parent = subprocess.Popen([sys.executable, "-c", FORKER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"up\n"
        assert wait_until(lambda: len(marked_processes(mark)) >= 5, 10)   # it is forking
        report = stop_family([psutil.Process(parent.pid)], grace_s=3.0)
        parent.wait(5)
        left = marked_processes(mark)
        assert left == [], left
        assert parent.pid in report.terminated + report.killed and not report.survivors
    finally:
        reap(marked_processes(mark))
        if parent.poll() is None:
            parent.kill()
            parent.wait()
