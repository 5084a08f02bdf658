"""The detached supervisor of one side's run (`carla-console -c RIG harness SIDE`, started by launch).

Per attempt: plan the launch again (server ALIVE, no evaluator of this side, ports, conda env, the resume
rule) → through the guard (Op.RELAUNCH, confirmation 'harness': the operator confirmed the launch) back
the checkpoint up and start the evaluator conda-pinned, stdout+stderr appended straight to the side's log
through an open file handle (no tee, no pipe: nothing of ours can block it or die with it) → watch it.
Every change goes to harness.json (atomic), which is how a new console rediscovers the run; every event
goes to events.jsonl beside it (the story of a night) and to the notifier.

Watching (every `supervisor.watch_s`), not only the exit code:
- heartbeat STALE with the evaluator alive → the same exact plan as guided recovery (ops/actions/
  recovery.py: the chain outer → inner, re-verified, audited; this process is never in it), under the
  side's confirmation policy (`supervisor.auto`); the killed attempt ends and the next one resumes;
- between attempts, a server DEAD → adapter polling; HUNG (measured: K silent rpc probes over T s) → its
  exact pids stopped through the guard, then adapter polling (ops/actions/restart_server.py);
  UNKNOWN → no action, the operator is woken, and after `unknown_wait_s` the side gives up.
Budgets bound it (attempts, recoveries per side and per route, server restarts per sliding hour); when
one is spent the side stops cleanly (`gave_up`, lifecycle GAVE_UP) and says which. Counters never reset.

A state dir that refuses writes (full, read-only) does not stop the supervisor: it keeps its state in
memory, says so in its log, and writes again as soon as it can.

SIGTERM (the guard stopping the chain, harness first): start nothing more, write `stopped`, exit at once.
The evaluator is not ours to kill then: the guard's plan names it by (pid, create_time) and signals it.
"""
from __future__ import annotations

import asyncio
import json
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
from ops.actions.launch import LaunchPlan, plan_launch, prepare_attempt, reread_same, start_server
from ops.actions.second_server import second_servers, stop_attempt
from ops.actions.supervise import Budgets, append_event, current_route, failing_route, quarantine_due
from ops.model import RigConfig, SideConfig
from ops.notify import Notifier
from ops.platform.procs import read_proc
from ops.platform.verbs import process_table
from ops.probes.chain import is_evaluator_of
from ops.probes.harness_state import AttemptRecord, HarnessState, HarnessStatus, SupervisorState, side_dir, write_state
from ops.probes.server import ServerMeasure
from ops.results.fake_success import EVENT_KIND as FAKE_SUCCESS
from ops.rig import LiveRig, open_rig
from ops.tristate import Beat, State

RETRY_DELAY_S = 2.0       # between a failed attempt and the next: let the server settle after a crash
POLL_S = 0.25
SECOND_SERVER_WATCH_S = 120.0   # an unpatched evaluator starts its server before it connects: look this long
EXIT_STOPPED = 128 + signal.SIGTERM


def say(msg: str) -> None:
    """The harness's own log (state_dir/sides/SIDE/harness.log): never the evaluator's log, whose mtime
    is the heartbeat."""
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [harness {os.getpid()}] {msg}", flush=True)
    except OSError:
        pass   # harness.log lives in the state dir: a full one must not stop the supervisor


class Harness:
    def __init__(self, rig: RigConfig, side: str, retry_delay_s: float = RETRY_DELAY_S,
                 adopt: HarnessState | None = None, adopting: bool = False) -> None:
        self.rig = rig
        self.sc: SideConfig = rig.side(side)
        self.retry_delay_s = retry_delay_s
        me = read_proc(os.getpid())
        if me is None:  # cannot happen on Linux; the state must carry a real create_time
            raise RuntimeError("cannot read this process from /proc")
        if adopt is not None:
            # A new supervisor continues the history: attempts, budgets and retired routes never reset.
            self.state = adopt
            self.state.pid, self.state.create_time = me.pid, me.create_time
            self.state.max_attempts = max(adopt.max_attempts, self.sc.evaluator.max_attempts)
        else:
            self.state = HarnessState(side=side, pid=me.pid, create_time=me.create_time,
                                      max_attempts=self.sc.evaluator.max_attempts, status="starting",
                                      updated=time.time())
        self.stop = asyncio.Event()
        self.child: subprocess.Popen | None = None
        self.files: AttemptFiles | None = None
        self.adopted: tuple[int, float] | None = None   # an orphan evaluator (pid, create_time) we watch
        self.recovered_at: float | None = None          # our kill of a stalled chain, until FRESH again
        self.stalled_since: float | None = None
        self.woke: set[str] = set()                     # 'needs a human' said once per cause
        self.notifier: Notifier | None = None
        self.adopting = adopting
        self.backup_blocked: str | None = None
        self.last_runs: tuple[str, ...] = ()   # the routes the current attempt runs, in order
        self.unpatched: str | None = None    # set when the evaluator started a second server

    # ---- state, events -----------------------------------------------------------------------------

    def save(self, status: HarnessStatus | None = None, detail: str | None = None,
             supervisor: SupervisorState | None = None) -> None:
        if status is not None:
            self.state.status = status
        if detail is not None:
            self.state.detail = detail
        if supervisor is not None:
            self.state.supervisor = supervisor
        self.state.updated = time.time()
        was = self.state.unsaved
        self.state.unsaved = None
        try:
            write_state(self.rig, self.state)
        except OSError as e:
            # Full or read-only state dir: keep going from memory, say so once, write again next time.
            self.state.unsaved = f"state dir unwritable since {time.strftime('%H:%M:%S')}: {e}"
            if was is None:
                say(f"WARNING: {self.state.unsaved}; working from memory")
            else:
                self.state.unsaved = was
            return
        if was is not None:
            say(f"state dir writable again (was: {was})")
            self.event("state-dir", f"state dir writable again (was: {was})")

    def event(self, kind: str, message: str, **fields) -> None:
        say(f"{kind}: {message}")
        try:
            append_event(self.rig, self.state.side, kind, message, attempt=self.state.attempt, **fields)
        except OSError as e:
            say(f"WARNING: event not written ({e})")
        if self.notifier is not None:
            extra = {} if kind == "finished" else self._scores()
            self.notifier.event(kind, message, self.state, **{**extra, **fields})

    def wake(self, cause: str, message: str) -> None:
        """'needs a human': once per cause, until the cause clears."""
        if cause in self.woke:
            return
        self.woke.add(cause)
        self.save(supervisor="needs-human", detail=message)
        self.event("needs-human", message, cause=cause)

    def confirmation(self) -> Confirmation:
        return Confirmation(self.sc.supervisor.auto, "policy:supervisor.auto")

    def give_up(self, why: str) -> int:
        self.event("gave-up", why)
        self.save("gave_up", why, supervisor="gave-up")
        return 1

    # ---- the run -----------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.save("starting", "planning the first attempt", supervisor="watching")
        say(f"side {self.state.side}: up to {self.state.max_attempts} attempts; policy auto={self.sc.supervisor.auto}")
        self.notifier = Notifier.for_rig(self.rig) if self.rig.notify else None
        if self.notifier is not None:
            sv = self.sc.server
            self.notifier.set_context(self.state.side, host=f"{sv.host} (server) / {self.sc.evaluator.host} (evaluator)",
                                      adapter=sv.adapter, ports=f"rpc {sv.rpc_port}-{sv.rpc_port + 2}, "
                                      f"tm {self.sc.evaluator.tm_port}", log=self.sc.evaluator.path(self.sc.evaluator.log))
        try:
            async with open_rig(self.rig) as live:
                # The fake-success alarm (issue 20) fires once a side's wall/game ratio falls below its floor.
                live.prober.live_results.on_fake_success = (
                    lambda side, fake: self.event(FAKE_SUCCESS, fake.message) if side == self.state.side else None)
                return await self._loop(live)
        except BaseException as e:
            self.save("failed", f"harness error: {type(e).__name__}: {e}")
            raise
        finally:
            if self.notifier is not None:
                await self.notifier.drain(5.0)

    def _on_signal(self, sig: int) -> None:
        say(f"{signal.Signals(sig).name}: no new attempt; exiting")
        self.stop.set()

    async def _loop(self, live: LiveRig) -> int:
        guard = Guard(live.hosts, Audit(self.rig.state_dir))
        if self.adopting:
            found = await self._find_evaluator(live)
            if found is None:
                self.save("refused", "adopt: no running evaluator of this side to adopt", supervisor="gave-up")
                return 3
            self._adopt(found, "a new supervisor adopted the running evaluator")
        polled = False
        unknown_since: float | None = None
        while True:
            if self.stop.is_set():
                return self._stopped()
            if self.adopted is None:
                lp = await plan_launch(live, self.state.side, retired=tuple(self.state.retired), alert=True)
                if self.stop.is_set():
                    return self._stopped()
                server = lp.plan.verdicts.get("server")
                if not lp.allowed and server in ("DEAD", "HUNG", "UNKNOWN") and not polled:
                    step = await self._server_step(live, lp, server)
                    if isinstance(step, int):
                        return step
                    if step == "retry":
                        unknown_since = unknown_since or time.time()
                        if time.time() - unknown_since > self.sc.supervisor.unknown_wait_s:
                            return self.give_up(f"server UNKNOWN for {time.time() - unknown_since:.0f} s "
                                                f"(unknown_wait_s {self.sc.supervisor.unknown_wait_s:.0f}): {lp.refused}")
                        await self._pause(self.sc.supervisor.watch_s)
                        continue
                    polled = step == "polled"
                    if polled:
                        continue
                unknown_since = None
                polled = False
                if not lp.allowed:
                    say(f"refused: {lp.refused}")
                    self.event("refused", f"next attempt refused: {lp.refused}")
                    self.save("refused", lp.refused, supervisor="gave-up")
                    return 3
                self.backup_blocked = None
                outcome = await guard.execute(lp.plan, Confirmation(True, "harness"), action=self._starter(lp))
                if not outcome.ok and self.backup_blocked:
                    self.save(supervisor="waiting", detail=self.backup_blocked)
                    self.wake("state-dir", self.backup_blocked)
                    await self._pause(self.sc.supervisor.watch_s)
                    continue
                if not outcome.ok:
                    why = outcome.refused or outcome.detail
                    say(f"attempt not started: {why}")
                    self.save("refused", why, supervisor="gave-up")
                    return 3
            rc = await self._wait(live)
            setup_failed: list[str] = []
            if self.files is not None:
                merged, setup_failed = self.files.finish()
                if merged:
                    say(f"merged {len(self.files.merged)} record(s) of the subset run into the side's checkpoint")
                if setup_failed:
                    say(f"agent set-up failed on {', '.join(setup_failed)}: counted for the bounded retry")
            for rid in setup_failed:
                self.state.route_failures[rid] = self.state.route_failures.get(rid, 0) + 1
                self._maybe_retire(rid, "agent set-up failure")
            if self.state.status == "gave_up":   # the watch spent a budget and stopped the chain itself
                if self.state.attempts and rc is not None:
                    self.state.attempts[-1].exit_code, self.state.attempts[-1].ended = rc, time.time()
                    self.save()
                return 1
            if rc is None:
                return self._stopped()
            rec = self.state.attempts[-1]
            rec.exit_code, rec.ended = rc, time.time()
            self.adopted = None
            say(f"attempt {rec.n} exited {rc}")
            if self.unpatched:
                self.save("refused", self.unpatched)   # another attempt would do the same
                return 3
            if rc == 0:
                self.event("finished", f"attempt {rec.n} exited 0", **self._scores())
                self.save("finished", f"attempt {rec.n} exited 0", supervisor="done")
                return 0
            if self.recovered_at is None:
                route = failing_route(self.sc, self.last_runs) if self.last_runs else current_route(self.sc)[0]
                if route is not None and route not in setup_failed:
                    self.state.route_failures[route] = self.state.route_failures.get(route, 0) + 1
                self.event("crashed", f"attempt {rec.n} exited {rc} on {route or 'an unknown route'}",
                           route=route, route_total=len(self.last_runs) or None)
                if route is not None:
                    self._maybe_retire(route, "crash")
            spent = Budgets(self.sc, self.state).attempts()
            if spent:
                return self.give_up(f"attempt {rec.n} exited {rc}; {spent}")
            self.save("resuming", f"attempt {rec.n} exited {rc}; attempt {rec.n + 1} in {self.retry_delay_s:.0f} s",
                      supervisor="waiting")
            await self._pause(self.retry_delay_s)

    def _maybe_retire(self, route: str, cause: str) -> None:
        """Quarantine: a route that failed `quarantine_after` times is retired. The next plan skips it
        (ops/actions/runplan.py retired=); the user's XML and every record stay as they are; the checkpoint
        is backed up and the act audited first. It counts as failed with score 0, named everywhere."""
        if not quarantine_due(self.sc, self.state, route):
            return
        n = self.state.route_failures.get(route, 0)
        data = rr.read_bytes(self.sc.evaluator.path(self.sc.evaluator.checkpoint)).data
        try:
            backup = rr.backup(self.rig, self.sc, data)
        except OSError as e:
            say(f"quarantine of {route} postponed: checkpoint backup not written ({e})")
            return
        why = f"{n} failures (last: {cause}) >= quarantine_after {self.sc.supervisor.quarantine_after}"
        try:
            Audit(self.rig.state_dir).write({
                "side": self.state.side, "host": self.sc.evaluator.host, "operation": "retire-route",
                "outcome": "done", "detail": f"route {route} retired: {why}; backup {backup}",
                "verdicts": {"route_failures": n}, "action": "skip the route in every later plan (retired=)",
                "confirmation": {"proceed": self.sc.supervisor.auto, "via": "policy:supervisor.quarantine_after"},
                "targets": []})
        except OSError as e:
            say(f"WARNING: audit line not written ({e})")
        self.state.retired.append(route)
        self.save()
        self.event("route-retired", f"route {route} retired after {why}; it counts as failed, score 0",
                   route=route, backup=backup)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _server_step(self, live, lp: LaunchPlan, server: str) -> str | int:
        """Between attempts, a server that is not ALIVE: 'polled' (restarted: plan again), 'retry'
        (UNKNOWN: wait and measure again), 'refuse' (nothing to do here), or an exit code."""
        from ops.actions.restart_server import measure_server, restart_server
        side = self.state.side
        measured = None
        if server in ("UNKNOWN", "HUNG"):
            # K probes over T: a hang is a measurement. Kept in the state, so a one-shot `status` (which
            # cannot make it) shows HUNG with this evidence and its age; a HUNG plan is measured again too.
            measured = await measure_server(live, side)
            self.state.server_measure = ServerMeasure.of(measured.server, live.prober.silence(side), time.time())
            self.save()
            snap = measured
            if snap.server.verdict.state is State.UNKNOWN:
                self.wake("server-unknown", f"server UNKNOWN ({snap.server.verdict.summary}): the supervisor "
                          f"cannot measure it, so it does nothing; act with `carla-console -c {self.rig.path} "
                          f"restart-server {side}` or fix the probe")
                return "retry"
            server = snap.server.verdict.state.value
            if server == "ALIVE":
                return "polled"   # it answered after all: plan again
        if server == "DEAD" and not (self.sc.server.auto_start or self.sc.supervisor.auto):
            return "refuse"
        if server in ("DEAD", "HUNG"):
            if not self.sc.supervisor.auto and server == "HUNG":
                self.wake("server-hung", f"server HUNG; policy auto is off: `carla-console -c {self.rig.path} "
                          f"restart-server {side}`")
                return "refuse"
            spent = Budgets(self.sc, self.state).server_restart()
            if spent:
                return self.give_up(f"server {server}: {spent}")
            self.save("starting", f"server {server}: restarting it (policy)", supervisor="restarting-server")
            self.event("server-" + server.lower(), f"server {server}: stopping (if hung) and restarting it")
            t0 = time.time()
            self.state.server_restarts.append(t0)
            if server == "DEAD":
                ok, detail = await start_server(live, side, Confirmation(True, "harness", typed=side))
            else:
                res = await restart_server(live, side, self.confirmation(), snap=measured)
                ok, detail = res.ok, res.detail
            self.save()
            if ok:
                self.event("server-restarted", f"server restarted in {time.time() - t0:.0f} s: {detail}")
                self.woke.discard("server-unknown")
                return "polled"
            self.event("server-restart-failed", detail)
            # Plan again after a pause: the next pass measures anew, and the restart budget bounds the tries.
            return "retry"
        return "refuse"

    def _stopped(self) -> int:
        if self.state.status == "gave_up":   # the supervisor stopped its own chain on a spent budget
            return 1
        self.save("stopped", "stopped by signal: no new attempt", supervisor="done")
        return EXIT_STOPPED

    def _scores(self) -> dict:
        from ops.actions.supervise import read_checkpoint
        from ops.parse.checkpoint import driving_score
        cp = read_checkpoint(self.sc)
        if cp is None:
            return {}
        ok = [r for r in cp.records if r.status in ("Completed", "Perfect") and not any(
            n for k, n in r.infractions.items() if k != "min_speed_infractions")]
        total = cp.progress[1] if cp.progress else None
        ds = driving_score(cp)
        return {"ds": None if ds is None else round(ds, 2), "sr": round(100.0 * len(ok) / total, 1) if total else None,
                "progress": list(cp.progress) if cp.progress else None,
                "wall_s": round(time.time() - self.state.attempts[0].started) if self.state.attempts else None}

    def _starter(self, lp: LaunchPlan):
        async def start(_plan: Plan) -> tuple[bool, str]:
            same, data, why = reread_same(lp, self.sc)
            if not same:
                return False, why
            try:
                backup = rr.backup(self.rig, self.sc, data)
            except OSError as e:
                # No backup, no attempt (nothing lost): the supervisor waits for room and tries again.
                self.backup_blocked = f"checkpoint backup not written ({e}): waiting for the state dir"
                return False, self.backup_blocked
            prepare_attempt(lp, self.sc)
            self.files = AttemptFiles(self.rig, self.sc, lp)
            rp = lp.runplan
            self.last_runs = tuple(rp.runs)
            say(f"plan ({rp.mode}): {rp.reason}; runs: {' '.join(rp.runs) or 'none'}; "
                f"overwrites: {' '.join(rp.overwrites) or 'none'}")
            ev = self.sc.evaluator
            log_path = Path(ev.path(ev.log))
            log_path.parent.mkdir(parents=True, exist_ok=True)
            n = self.state.attempt + 1
            # Each attempt also gets an output file of its own (its tail and exit code readable alone); the
            # evaluator's log is still the heartbeat. Both are plain file handles: nothing of ours in between.
            attempt_log = self._attempt_log(n)
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
            self._log_offset = log_path.stat().st_size if log_path.exists() else 0
            self._attempt_log_path = attempt_log
            self.save("running", f"attempt {n}: {lp.decision.reason}", supervisor="watching")
            say(f"attempt {n} started: wrapper {self.child.pid}; {lp.decision.reason}; backup {backup}")
            return True, f"attempt {n}: wrapper pid {self.child.pid}, {lp.decision.reason}, backup {backup}"
        return start

    def _orphan(self) -> tuple[int, float] | None:
        rec = self.state.attempts[-1] if self.state.attempts else None
        if rec is None or rec.evaluator_pid is None or rec.evaluator_create_time is None:
            return None
        if self.child is not None and rec.evaluator_pid == self.child.pid:
            return None   # never found the inner evaluator: nothing to tell apart from the wrapper
        p = read_proc(rec.evaluator_pid)
        if p is None or p.state == "Z" or abs(p.create_time - rec.evaluator_create_time) > 0.05:
            return None
        return (p.pid, p.create_time)

    def _attempt_log(self, n: int) -> Path:
        return side_dir(self.rig, self.state.side) / "attempts" / f"attempt-{n}.log"

    def _write_attempt_output(self, rc: int | None) -> None:
        """The attempt's slice of the evaluator log and its exit code, in a file of its own."""
        path = getattr(self, "_attempt_log_path", None)
        if path is None:
            return
        ev = self.sc.evaluator
        try:
            with open(ev.path(ev.log), "rb") as f:
                f.seek(getattr(self, "_log_offset", 0))
                data = f.read(4_000_000)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data + f"\n[carla-console] attempt exit code: {rc}\n".encode())
        except OSError as e:
            say(f"WARNING: attempt output not written ({e})")

    async def _wait(self, live: LiveRig) -> int | None:
        """The attempt's exit code, or None when a signal asked us to stop first. Watches meanwhile."""
        found_inner = False
        t0 = time.monotonic()
        next_watch = time.monotonic() + self.sc.supervisor.watch_s
        last_look = 0.0
        while True:
            rc = self._poll_child()
            if rc is not None and self.child is not None and not self.stop.is_set():
                orphan = self._orphan()
                if orphan is not None:   # the wrapper died (OOM), its evaluator did not: keep watching it
                    say(f"wrapper {self.child.pid} exited {rc}; evaluator {orphan[0]} still runs")
                    self._adopt(orphan, f"the wrapper died ({rc})")
                    continue
            if rc is not None:
                self._write_attempt_output(rc)
                return rc
            if self.stop.is_set():
                return None
            if self.files is not None:
                self.files.poll()
            if (self.child is not None and not self.sc.server.managed_by_evaluator and time.monotonic() - t0 < SECOND_SERVER_WATCH_S
                    and time.monotonic() - last_look >= 1.0):
                last_look = time.monotonic()
                if await self._second_server(live):
                    return self.child.wait()
            if not found_inner and self.child is not None and time.monotonic() - t0 < 30:
                found_inner = await self._record_inner(live)
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + self.sc.supervisor.watch_s
                if self.state.unsaved:
                    self.save()   # the state dir refused a write: try again
                try:
                    await self._watch(live)
                except Exception as e:   # a failed look is logged; the next one comes on time
                    say(f"watch failed: {type(e).__name__}: {e}")
            try:
                await asyncio.wait_for(self.stop.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass

    async def _find_evaluator(self, live) -> tuple[int, float] | None:
        table = await process_table(live.hosts[self.sc.evaluator.host], 5.0)
        if not table.ok:
            return None
        from ops.probes.chain import find_chain
        ev = find_chain(table, self.rig, self.sc, local=True).evaluator
        return None if ev is None else (ev.pid, ev.create_time)

    def _adopt(self, found: tuple[int, float], why: str) -> None:
        """Watch an evaluator that is not (or no longer) our child; the attempt goes on, its count too."""
        self.adopted, self.child = found, None
        if not self.state.attempts:
            self.state.attempt = 1
            self.state.attempts.append(AttemptRecord(n=1, started=time.time(), resume=False, argv=[]))
        rec = self.state.attempts[-1]
        rec.evaluator_pid, rec.evaluator_create_time = found
        self.event("adopted", f"{why}: evaluator {found[0]}", evaluator_pid=found[0])
        self.save("running", f"attempt {self.state.attempt}: adopted evaluator {found[0]}", supervisor="watching")

    def _poll_child(self) -> int | None:
        if self.child is not None:
            return self.child.poll()
        if self.adopted is not None:
            p = read_proc(self.adopted[0])
            if p is None or p.state == "Z" or abs(p.create_time - self.adopted[1]) > 0.05:
                # Not our child: its exit code is not ours to read. The checkpoint says how it ended.
                from ops.actions.supervise import read_checkpoint
                cp = read_checkpoint(self.sc)
                done = cp is not None and cp.progress is not None and cp.progress[0] == cp.progress[1] \
                    and cp.entry_status == "Finished"
                return 0 if done else 1
        return None

    def _take_putback(self) -> None:
        """`retired SIDE --put-back ROUTE` while we run: the route leaves the retired set (its failure
        count starts again); the next attempt's plan runs it."""
        from ops.actions.supervise import PUTBACK_FILE
        path = side_dir(self.rig, self.state.side) / PUTBACK_FILE
        try:
            routes = json.loads(path.read_text()).get("routes") or []
            path.unlink()
        except (OSError, ValueError, AttributeError):
            return
        for r in routes:
            if r in self.state.retired:
                self.state.retired.remove(r)
                self.state.route_failures[r] = 0
                self.event("route-put-back", f"route {r} put back by the operator", route=r)
        self.save()

    async def _watch(self, live) -> None:
        side = self.state.side
        self._take_putback()
        snap = await live.prober.side(side, rpc=False, vram=False)
        hb = snap.heartbeat
        if self.recovered_at is not None and hb.beat is Beat.FRESH and hb.age_s is not None \
                and time.time() - hb.age_s > self.recovered_at:
            mttr = time.time() - (self.stalled_since or self.recovered_at)
            self.event("recovered", f"heartbeat FRESH again {mttr:.0f} s after the stall", mttr_s=round(mttr, 1))
            self.recovered_at = self.stalled_since = None
            self.woke.discard("stalled")
            self.save(supervisor="watching")
        if not (snap.evaluator.verdict.state is State.ALIVE and hb.beat is Beat.STALE):
            if hb.beat is Beat.FRESH:
                self.stalled_since = None if self.recovered_at is None else self.stalled_since
            return
        if self.recovered_at is not None and self.state.supervisor == "recovering":
            return
        now = time.time()
        if self.stalled_since is None:
            self.stalled_since = now - max(0.0, (hb.age_s or 0.0) - hb.stall_s)
            route, index, total = current_route(self.sc)
            self.event("stalled", f"log quiet {hb.age_s:.0f} s (stall_s {hb.stall_s:.0f})", route=route,
                       route_index=index, route_total=total, quiet_s=round(hb.age_s or 0.0, 1),
                       last_line=(snap.log_tail or ("",))[-1])
        if not self.sc.supervisor.auto:
            self.wake("stalled", f"stalled and policy auto is off: `carla-console -c {self.rig.path} recover {side}`")
            return
        route = failing_route(self.sc, self.last_runs) if self.last_runs else current_route(self.sc)[0]
        spent = Budgets(self.sc, self.state).recovery(route)
        if spent:
            self.wake("budget", spent)
            await self._recover(live, route, final=spent)
            return
        await self._recover(live, route)

    async def _recover(self, live, route: str | None, final: str | None = None) -> None:
        """The guided-recovery plan, executed under the policy. With `final`, the side then gives up."""
        from ops.actions.recovery import execute_kill, recovery_plan
        side = self.state.side
        self.save(supervisor="recovering", detail=f"recovering a stalled evaluator on {route}")
        plan = await recovery_plan(live, side)
        res = await execute_kill(live, plan, self.confirmation())
        if not res.ok and plan.verdict.get("heartbeat") == "FRESH" and not final:
            # The log moved between the watch and the plan: the stall ended by itself. The guard has
            # audited the refusal; nobody needs waking for it.
            self.stalled_since = None
            self.save(supervisor="watching")
            self.event("stall-cleared", "the log moved again before the recovery: nothing stopped", route=route)
            return
        if not res.ok:
            why = res.step.detail
            self.save(supervisor="needs-human")
            self.wake("recovery-refused", f"automatic recovery refused: {why}; "
                      f"`carla-console -c {self.rig.path} recover {side}`")
            return
        if final:
            self.give_up(final)
            self.stop.set()
            return
        self.state.recoveries += 1
        if route is not None:
            self.state.route_recoveries[route] = self.state.route_recoveries.get(route, 0) + 1
            self.state.route_failures[route] = self.state.route_failures.get(route, 0) + 1
        self.recovered_at = time.time()
        if route is not None:
            self._maybe_retire(route, "hang")
        self.save(supervisor="recovering", detail=f"recovery {self.state.recoveries}: chain stopped, resuming")
        self.event("recovering", f"stalled chain stopped ({res.step.detail}); the next attempt resumes",
                   route=route, recoveries=self.state.recoveries)

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


async def run_harness(rig: RigConfig, side: str, adopt: bool = False) -> int:
    if not adopt:
        return await Harness(rig, side).run()
    from ops.probes.harness_state import read_state
    prev = read_state(rig, side)
    return await Harness(rig, side, adopt=prev if isinstance(prev, HarnessState) else None, adopting=True).run()


def main(rig: RigConfig, side: str, adopt: bool = False) -> int:
    if side not in rig.sides:
        print(f"carla-console harness: no side {side!r} in {rig.path}", file=sys.stderr)
        return 2
    return asyncio.run(run_harness(rig, side, adopt))
