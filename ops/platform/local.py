"""The machine the console runs on: asyncio subprocesses, argv only, always bounded, never orphaned.

Each command gets its own session and process group (start_new_session=True), so that a timeout can
stop the command *and everything it started* with one killpg: TERM, a short grace, then KILL. The same
cleanup runs for group members left behind after the leader exits: `run` is for commands that finish;
long-lived processes go through `spawn_detached`.

env: entries are ADDED to the console's inherited environment (a probe needs PATH, HOME, ...); the same
rule holds on every host (`env K=V` on ssh, ProcessStartInfo on Windows).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from ops.platform.base import Host, Platform, Result
from ops.platform.common import (
    KILL_GRACE_S,
    MAX_OUTPUT,
    SpawnError,
    check_argv,
    check_env,
    decode,
    read_capped,
    settled,
    timeout_error,
)
from ops.platform.linux_local import LinuxLocal
from ops.platform.procs import stat_state
from ops.platform.timeouts import within


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        # Cannot happen for a group we created, unless a member changed uid (setuid binary). Keep going:
        # the leader is still killed through its own pid below.
        return True


def _group_alive(pgid: int) -> bool:
    """Whether the group has a member that is not a zombie.

    killpg(pgid, 0) alone also succeeds for zombies, and a grandchild killed after re-parenting stays a
    zombie for as long as init leaves it (in some containers PID 1 never reaps): such a group is gone
    for our purposes. Only when killpg says "exists" do we pay for a /proc scan (tens of ms).
    """
    if not _killpg(pgid, 0):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True  # no procfs: trust killpg
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # pid (comm) state ppid pgrp ...: comm may hold spaces and ')' - split after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 18 and int(fields[2]) == pgid and stat_state(fields) not in ("Z", "X"):
            return True
    return False


async def stop_group(proc: asyncio.subprocess.Process, grace: float = KILL_GRACE_S) -> None:
    """TERM the process group of `proc` (its pid: it is a session leader), wait `grace` for it to go,
    then KILL what is left, and reap the leader.

    pgid reuse: the leader's pid stays allocated while any member of its group exists, and we signal
    only until the group is gone, so killpg cannot reach a stranger (barring a window of microseconds
    between the last member's exit and our check, documented and accepted).
    """
    pgid = proc.pid
    if _killpg(pgid, signal.SIGTERM):
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.returncode is not None and not _group_alive(pgid):
                break
            await asyncio.sleep(0.02)
        else:
            _killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        if proc.returncode is None:
            proc.kill()
    await proc.wait()


class LocalHost(Host):
    is_local = True  # probes may read /proc and files directly

    def __init__(self, name: str = "local", os_name: str = "linux", max_output: int = MAX_OUTPUT) -> None:
        self.name = name
        self.os = os_name
        self.max_output = max_output
        self.platform: Platform = LinuxLocal(self)

    def __repr__(self) -> str:
        return f"LocalHost({self.name!r})"

    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        t0 = time.monotonic()
        args = check_argv(argv)
        try:
            extra = check_env(env)
        except ValueError as e:
            return Result(args, None, took_s=0.0, error=f"spawn: {e}")
        full_env = {**os.environ, **extra} if extra else None
        try:
            proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=full_env, cwd=cwd, start_new_session=True)
        except (OSError, ValueError) as e:  # FileNotFoundError, PermissionError, NotADirectoryError, ...
            return Result(args, None, took_s=time.monotonic() - t0, error=f"spawn: {e}")

        readers = settled(asyncio.gather(read_capped(proc.stdout, self.max_output),
                                         read_capped(proc.stderr, self.max_output)))
        try:
            # within(): no task of its own per await (ops/platform/timeouts.py); shield: a timeout leaves the
            # readers draining the pipes while the group is stopped.
            (out, out_drop), (err, err_drop) = await within(timeout, asyncio.shield(readers))
            # Pipes at EOF: the leader has (almost surely) exited; waiting for it is bounded by the
            # remaining time too.
            left = max(0.05, timeout - (time.monotonic() - t0))
            await within(left, proc.wait())
        except asyncio.TimeoutError:
            try:
                await stop_group(proc)
            except BaseException:
                _killpg(proc.pid, signal.SIGKILL)  # cancelled during the grace: no grace left
                raise
            drained_out, drained_err = await self._drain(readers)
            return Result(args, None, stdout=decode(*drained_out), stderr=decode(*drained_err),
                          took_s=time.monotonic() - t0, error=timeout_error(timeout), timed_out=True)
        except BaseException:
            # Cancelled (or anything else): never leave the group behind. KILL at once (no grace: the
            # caller is going away), then wait a moment for the exit so the transport closes inside
            # this loop; a second cancellation only cuts that wait short.
            _killpg(proc.pid, signal.SIGKILL)
            readers.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(proc.wait(), 1.0)
            raise
        if _group_alive(proc.pid):
            # The leader exited but left members of its group (e.g. `cmd &` holding no pipe): those
            # would be orphans. run() owns everything it started.
            await stop_group(proc)
        return Result(args, proc.returncode, stdout=decode(out, out_drop), stderr=decode(err, err_drop),
                      took_s=time.monotonic() - t0)

    @staticmethod
    async def _drain(readers: asyncio.Future) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
        """After the group is dead its pipes reach EOF at once, unless a process outside the group
        (one that called setsid itself) still holds them: give up after a moment then."""
        try:
            return await asyncio.wait_for(readers, 1.0)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            return (b"", 0), (b"", 0)

    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None,
                             timeout: float = 15.0) -> int:
        return spawn_detached(argv, env=env, cwd=cwd, log_path=log_path)


def spawn_detached(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                   log_path: str | None = None) -> int:
    """Start a long-lived process in its own session and return its pid.

    Not an asyncio subprocess on purpose: asyncio's subprocess transport kills its child when the
    transport is closed or garbage-collected, and a detached run must survive the console. The fork+exec
    itself is a few ms, so it is done synchronously. stdin is /dev/null; stdout and stderr are appended
    to log_path (opened here, so a bad path is our error, not a silent child failure); no pipes, so the
    child never blocks on us. A daemon thread reaps it when it exits (no zombie while the console runs;
    after the console exits it is re-parented to init, in its own session: no SIGHUP).
    """
    args = check_argv(argv)
    try:
        extra = check_env(env)
    except ValueError as e:
        raise SpawnError(f"spawn: {e}") from e
    full_env = {**os.environ, **extra}
    try:
        log = open(log_path, "ab") if log_path else open(os.devnull, "wb")  # noqa: SIM115
    except OSError as e:
        raise SpawnError(f"spawn: cannot open log {log_path}: {e}") from e
    try:
        with log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=full_env, cwd=cwd, start_new_session=True, close_fds=True)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise SpawnError(f"spawn: {e}") from e
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc.pid
