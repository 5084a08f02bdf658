"""The detached supervisor of one side's run (`carla-console -c RIG harness SIDE`, started by launch).

Per attempt: plan the launch again (server ALIVE, no evaluator of this side, ports, conda env, the resume
rule) → through the guard (Op.RELAUNCH, confirmation 'harness': the operator confirmed the launch) back
the checkpoint up and start the evaluator conda-pinned, stdout+stderr appended straight to the side's log
through an open file handle (no tee, no pipe: nothing of ours can block it or die with it) → wait. Exit 0:
finished. Non-zero: attempt += 1 up to max_attempts, re-applying the rule (so a crash resumes with
`--resume True` once a route is recorded). Every change goes to harness.json (atomic), which is how a new
console rediscovers the run.

SIGTERM (the guard stopping the chain, harness first): start nothing more, write `stopped`, exit at once.
The evaluator is not ours to kill here: the guard's plan names it by (pid, create_time) and signals it.
Adapter polling before the first attempt (config-driven) is a TODO: the harness refuses on a server that
is not ALIVE and says to run `carla-console adapter SIDE`.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ops.actions import resume as rr
from ops.actions.attempt_files import AttemptFiles
from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Plan
from ops.actions.launch import LaunchPlan, needs_server, plan_launch, prepare_attempt, reread_same, start_server
from ops.actions.second_server import second_servers, stop_attempt
from ops.model import RigConfig, SideConfig
from ops.platform.procs import read_proc
from ops.platform.verbs import process_table
from ops.probes.chain import is_evaluator_of
from ops.probes.harness_state import AttemptRecord, HarnessState, write_state
from ops.rig import LiveRig, open_rig

RETRY_DELAY_S = 2.0       # between a failed attempt and the next: let the server settle after a crash
POLL_S = 0.25
SECOND_SERVER_WATCH_S = 120.0   # an unpatched evaluator starts its server before it connects: look this long
EXIT_STOPPED = 128 + signal.SIGTERM


def say(msg: str) -> None:
    """The harness's own log (state_dir/sides/SIDE/harness.log): never the evaluator's log, whose mtime
    is the heartbeat."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [harness {os.getpid()}] {msg}", flush=True)


class Harness:
    def __init__(self, rig: RigConfig, side: str, retry_delay_s: float = RETRY_DELAY_S) -> None:
        self.rig = rig
        self.sc: SideConfig = rig.side(side)
        self.retry_delay_s = retry_delay_s
        me = read_proc(os.getpid())
        if me is None:  # cannot happen on Linux; the state must carry a real create_time
            raise RuntimeError("cannot read this process from /proc")
        self.state = HarnessState(side=side, pid=me.pid, create_time=me.create_time,
                                  max_attempts=self.sc.evaluator.max_attempts, status="starting",
                                  updated=time.time())
        self.stop = asyncio.Event()
        self.child: subprocess.Popen | None = None
        self.files: AttemptFiles | None = None
        self.unpatched: str | None = None    # set when the evaluator started a second server

    def save(self, status: str | None = None, detail: str | None = None) -> None:
        if status is not None:
            self.state.status = status
        if detail is not None:
            self.state.detail = detail
        self.state.updated = time.time()
        write_state(self.rig, self.state)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.save("starting", "planning the first attempt")
        say(f"side {self.state.side}: up to {self.state.max_attempts} attempts")
        try:
            async with open_rig(self.rig) as live:
                return await self._loop(live)
        except BaseException as e:
            self.save("failed", f"harness error: {type(e).__name__}: {e}")
            raise

    def _on_signal(self, sig: int) -> None:
        say(f"{signal.Signals(sig).name}: no new attempt; exiting")
        self.stop.set()

    async def _loop(self, live: LiveRig) -> int:
        guard = Guard(live.hosts, Audit(self.rig.state_dir))
        polled = False
        while True:
            if self.stop.is_set():
                return self._stopped()
            lp = await plan_launch(live, self.state.side, alert=True)   # nobody watches: alert on refusal
            if self.stop.is_set():
                return self._stopped()
            if not lp.allowed and needs_server(lp, self.sc) and not polled:
                # The server died under the run (or was never up) and the config lets us start it: adapter
                # polling through the guard, once per attempt, then plan the launch again.
                polled = True
                self.save("starting", "server DEAD: adapter polling (server.auto_start)")
                ok, detail = await start_server(live, self.state.side, Confirmation(True, "harness",
                                                                                    typed=self.state.side))
                say(detail)
                if ok:
                    continue
            polled = False
            if not lp.allowed:
                say(f"refused: {lp.refused}")
                self.save("refused", lp.refused)
                return 3
            outcome = await guard.execute(lp.plan, Confirmation(True, "harness"), action=self._starter(lp))
            if not outcome.ok:
                why = outcome.refused or outcome.detail
                say(f"attempt not started: {why}")
                self.save("refused", why)
                return 3
            rc = await self._wait(live)
            if self.files is not None:
                merged, setup_failed = self.files.finish()
                if merged:
                    say(f"merged {len(self.files.merged)} record(s) of the subset run into the side's checkpoint")
                if setup_failed:
                    say(f"agent set-up failed on {', '.join(setup_failed)}: counted for the bounded retry")
            if rc is None:
                return self._stopped()
            rec = self.state.attempts[-1]
            rec.exit_code, rec.ended = rc, time.time()
            say(f"attempt {rec.n} exited {rc}")
            if self.unpatched:
                self.save("refused", self.unpatched)   # another attempt would do the same
                return 3
            if rc == 0:
                self.save("finished", f"attempt {rec.n} exited 0")
                return 0
            if self.state.attempt >= self.state.max_attempts:
                self.save("failed", f"attempt {rec.n} exited {rc}; {self.state.max_attempts} attempts used")
                return 1
            self.save("resuming", f"attempt {rec.n} exited {rc}; attempt {rec.n + 1} in {self.retry_delay_s:.0f} s")
            try:
                await asyncio.wait_for(self.stop.wait(), self.retry_delay_s)
            except asyncio.TimeoutError:
                pass

    def _stopped(self) -> int:
        self.save("stopped", "stopped by signal: no new attempt")
        return EXIT_STOPPED

    def _starter(self, lp: LaunchPlan):
        async def start(_plan: Plan) -> tuple[bool, str]:
            same, data, why = reread_same(lp, self.sc)
            if not same:
                return False, why
            backup = rr.backup(self.rig, self.sc, data)
            prepare_attempt(lp, self.sc)
            self.files = AttemptFiles(self.rig, self.sc, lp)
            rp = lp.runplan
            say(f"plan ({rp.mode}): {rp.reason}; runs: {' '.join(rp.runs) or 'none'}; "
                f"overwrites: {' '.join(rp.overwrites) or 'none'}")
            ev = self.sc.evaluator
            log_path = Path(ev.path(ev.log))
            log_path.parent.mkdir(parents=True, exist_ok=True)
            n = self.state.attempt + 1
            # The child writes to its own dup of the fd: we close ours at once, nothing of ours sits
            # between the evaluator and its log.
            with open(log_path, "ab") as log:
                self.child = subprocess.Popen(list(lp.argv), cwd=lp.cwd, env={**os.environ, **lp.env},
                                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              close_fds=True)
            wrapper = read_proc(self.child.pid)
            self.state.attempt = n
            self.state.attempts.append(AttemptRecord(
                n=n, started=time.time(), resume=lp.resume, argv=list(lp.argv),
                evaluator_pid=self.child.pid, evaluator_create_time=wrapper.create_time if wrapper else None,
                backup=backup))
            self.save("running", f"attempt {n}: {lp.decision.reason}")
            say(f"attempt {n} started: wrapper {self.child.pid}; {lp.decision.reason}; backup {backup}")
            return True, f"attempt {n}: wrapper pid {self.child.pid}, {lp.decision.reason}, backup {backup}"
        return start

    async def _wait(self, live: LiveRig) -> int | None:
        """The attempt's exit code, or None when a signal asked us to stop first."""
        assert self.child is not None
        found_inner = False
        t0 = time.monotonic()
        last_look = 0.0
        while True:
            rc = self.child.poll()
            if rc is not None:
                return rc
            if self.stop.is_set():
                return None
            if self.files is not None:
                self.files.poll()
            if (not self.sc.server.managed_by_evaluator and time.monotonic() - t0 < SECOND_SERVER_WATCH_S
                    and time.monotonic() - last_look >= 1.0):
                last_look = time.monotonic()
                if await self._second_server(live):
                    return self.child.wait()
            if not found_inner and time.monotonic() - t0 < 30:
                found_inner = await self._record_inner(live)
            try:
                await asyncio.wait_for(self.stop.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass

    async def _second_server(self, live: LiveRig) -> bool:
        """An unpatched evaluator started a server of its own on this external-server side: stop the
        attempt (its server group too) through the guard, and start no more (ops/actions/second_server.py)."""
        assert self.child is not None
        table = await process_table(live.hosts[self.sc.evaluator.host], 5.0, fresh_pids=frozenset([self.child.pid]))
        if not table.ok:
            return False
        found = second_servers(table, self.child.pid)
        if not found:
            return False
        outcome, reason = await stop_attempt(Guard(live.hosts, Audit(self.rig.state_dir)), self.sc, table,
                                             self.child.pid, found)
        say(f"{reason}; stopped: {outcome.detail or outcome.refused}")
        self.unpatched = reason
        return True

    async def _record_inner(self, live: LiveRig) -> bool:
        """Replace the wrapper's pid in the attempt record with the real evaluator's, once it has exec'd."""
        assert self.child is not None
        table = await process_table(live.hosts[self.sc.evaluator.host], 5.0,
                                    fresh_pids=frozenset([self.child.pid]))
        if not table.ok:
            return False
        inner = [p for p in table.descendants(self.child.pid) if is_evaluator_of(p, self.sc)]
        if not inner:
            return False
        rec = self.state.attempts[-1]
        rec.evaluator_pid, rec.evaluator_create_time = inner[-1].pid, inner[-1].create_time
        self.save()
        return True


async def run_harness(rig: RigConfig, side: str) -> int:
    return await Harness(rig, side).run()


def main(rig: RigConfig, side: str) -> int:
    if side not in rig.sides:
        print(f"carla-console harness: no side {side!r} in {rig.path}", file=sys.stderr)
        return 2
    return asyncio.run(run_harness(rig, side))
