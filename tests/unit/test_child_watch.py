"""The pidfd child watcher: real children's exit codes arrive, on the main loop and on a thread's own loop,
without a waitpid thread per child. Each test installs it in a fresh interpreter: the watcher is global."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ops.platform.child_watch import use_pidfd_child_watcher

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import asyncio, sys, threading
    sys.path.insert(0, sys.argv[1])
    from ops.platform.child_watch import use_pidfd_child_watcher
    assert use_pidfd_child_watcher()

    async def codes():
        threads = threading.active_count()
        procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", f"raise SystemExit({c})")
                 for c in (0, 3, 7)]
        spawned_threads = threading.active_count() - threads
        return [await p.wait() for p in procs], spawned_threads

    print(asyncio.run(codes()))
    out = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(codes())))
    t.start(); t.join()
    print(out[0])
""")


def test_exit_codes_arrive_on_any_loop_without_a_thread_per_child() -> None:
    if sys.version_info >= (3, 12):
        pytest.skip("3.12 waits through pidfds itself")
    probe = subprocess.run([sys.executable, "-c", "import os; os.close(os.pidfd_open(os.getpid()))"])
    if probe.returncode != 0:
        pytest.skip("no pidfds on this kernel")
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["([0, 3, 7], 0)", "([0, 3, 7], 0)"]


def test_it_is_left_alone_where_python_does_it_already(monkeypatch) -> None:
    monkeypatch.setattr(sys, "version_info", (3, 12, 0))
    assert use_pidfd_child_watcher() is False
