"""One launch of a side at a time, across every console, CLI and TUI on this machine (flock).

Two launches of one side at the same moment each planned "nothing runs", each started a harness, and each
harness then saw the other and refused: nothing ran. A launch holds the side's lock from its final plan
until its harness has reported, so the second one plans after the first harness exists and refuses
cleanly: exactly one runs. The lock is the kernel's (flock on state_dir/sides/SIDE/launch.lock): a console
killed while holding it releases it with its last descriptor, so a stale lock file blocks nobody.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path


class SideBusy(Exception):
    """Another launch of the side held the lock for longer than the caller would wait."""


def lock_path(state_dir: str, side: str) -> Path:
    return Path(state_dir) / "sides" / side / "launch.lock"


@contextlib.asynccontextmanager
async def side_lock(state_dir: str, side: str, wait_s: float, poll_s: float = 0.05) -> AsyncIterator[None]:
    """Hold the side's launch lock; wait for it at most wait_s (SideBusy after that). O_CLOEXEC: the
    harness a launch starts must not inherit (and so hold) the lock for its whole run."""
    path = lock_path(state_dir, side)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SideBusy(f"another launch of side {side} holds {path} (waited {wait_s:.0f} s)") from None
                await asyncio.sleep(poll_s)
        with contextlib.suppress(OSError):   # who holds it, for the operator reading the file
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)   # releases the flock
