"""Session-wide rules: no test leaves a process behind.

Every process a test starts inherits CARLA_CONSOLE_TEST_SESSION; at the end of the session any process
still carrying this session's value in its environment is a leak: the session reaps it by pid and fails.
(The marker works across setsid and double forks, which parent-child bookkeeping does not.)
"""
from __future__ import annotations

import os
import time
import uuid

import pytest

from tests.support.session import MARK_VAR, marked_processes, reap

if __name__ != "conftest":   # imported again under another name, it would set a second mark (support/session.py)
    raise ImportError(f"conftest imported as {__name__}: import tests.support.session instead")

# This machine exports PYTHONUNBUFFERED=1, which hides what a real rig does: an evaluator whose stdout is
# a file block-buffers (8 KiB) unless the console runs it unbuffered, and the log's mtime is the heartbeat.
# No test inherits it: whatever needs unbuffered output must ask for it (the console's pinned execution does).
os.environ.pop("PYTHONUNBUFFERED", None)

SESSION_MARK = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ[MARK_VAR] = SESSION_MARK

pytest_plugins = ["tests.support.conftest_ssh"]


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes():
    yield
    # Give exiting processes a moment: a TERM sent by the last test may still be in flight.
    deadline = time.monotonic() + 5
    left = marked_processes(SESSION_MARK)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = marked_processes(SESSION_MARK)
    if left:
        detail = []
        for pid in left:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                detail.append(f"{pid}: {cmd[:200]}")
            except OSError:
                detail.append(str(pid))
        reap(left)
        pytest.fail("processes left behind by the tests (reaped now):\n" + "\n".join(detail), pytrace=False)
