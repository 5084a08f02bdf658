"""Children waited for through pidfds, not a thread each (Python 3.11).

Python 3.11's default child watcher starts a thread for every subprocess just to block in waitpid: on the
idle console (an nvidia-smi or conda probe every few seconds) starting and ending those threads was 5 % of
its CPU. 3.12 waits through a pidfd on the event loop when the kernel has them (Linux 5.3+); this gives 3.11
the same. The stock 3.11 PidfdChildWatcher serves only the one loop it was attached to, so here each child
is watched on the loop that spawned it, as 3.12 does: the demo's launcher thread runs a loop of its own.
"""
from __future__ import annotations

import asyncio
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any


class RunningLoopPidfdWatcher(asyncio.AbstractChildWatcher):
    def add_child_handler(self, pid: int, callback: Callable[..., Any], *args: Any) -> None:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(pid)
        loop.add_reader(pidfd, self._reap, loop, pid, pidfd, callback, args)

    def _reap(self, loop: asyncio.AbstractEventLoop, pid: int, pidfd: int, callback: Callable[..., Any],
              args: tuple) -> None:
        loop.remove_reader(pidfd)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:    # reaped elsewhere (as 3.11's watchers answer: status unknown)
            returncode = 255
        else:
            returncode = os.waitstatus_to_exitcode(status)
        os.close(pidfd)
        callback(pid, returncode, *args)

    def remove_child_handler(self, pid: int) -> bool:
        return True      # the reader goes with its callback: nothing kept per pid

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        pass             # every child is watched on the loop that spawned it

    def close(self) -> None:
        pass

    def is_active(self) -> bool:
        return True

    def __enter__(self) -> RunningLoopPidfdWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def use_pidfd_child_watcher() -> bool:
    """Install the watcher where it helps (Python < 3.12 on a kernel with pidfds). True: installed."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:      # an old kernel or a seccomp filter: keep the threads
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(RunningLoopPidfdWatcher())
    return True
