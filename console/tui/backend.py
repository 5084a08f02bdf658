"""`carla-console [-c FILE] [--read-only] [--demo]`: the TUI entry, and the backend binding it to ops.

The app (console/tui/app.py) is built against the small Backend protocol (console/tui/protocol.py);
LiveBackend implements it over a LiveRig and the operation modules of ops/actions.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.tui.audit_feed import REMOTE_TAIL_BYTES, REMOTE_TAIL_LINES, AuditFeed
from console.tui.protocol import ActionResult, PortsReport, StepOutcome, Unavailable
from ops.actions import adapter, launch, reclaim, recovery, restart_server
from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Plan
from ops.model import RigConfig
from ops.probes import ports
from ops.probes.prober import SideSnapshot, display_within_s
from ops.probes.supervised_server import with_supervisor_measure

if TYPE_CHECKING:
    from ops.platform.base import Host
    from sim import rig as sim  # the demo imports it when it runs

FULL_EVERY = 3   # beats: a served side's full poll every third beat or less often (full_every)
# At most about this many served sides' full polls a beat: a rig of tens of sides spreads them over more
# beats (32 sides: each every 8th). What moves on a served side between full polls is its heartbeat, read
# every beat; a beat that is not FRESH ends the side's served state, so its next poll is full.
FULL_PER_BEAT = 4
# And at most about this many served sides' heartbeat reads a beat: 32 sides read each every second beat
# (the table shows the age of the last read). A side that is not served is read in full every beat.
BEATS_PER_BEAT = 16


def full_every(sides: int) -> int:
    """Beats between a served side's full polls on a rig of this many sides."""
    return max(FULL_EVERY, -(-sides // FULL_PER_BEAT))


def beat_every(sides: int) -> int:
    """Beats between a served side's heartbeat reads on a rig of this many sides."""
    return max(1, -(-sides // BEATS_PER_BEAT))


def falls_on(beat: int, phase: int, every: int) -> bool:
    """A served side's poll (full, or its heartbeat read) falls on this beat. The phase (the side's slot)
    staggers the sides: started together, they would otherwise all go full on the same beat, a burst of CPU
    every `every` beats that a key press waits behind."""
    return (beat + phase) % every == 0


LOG_TAIL_LINES = 3
FRESH_WAIT_S = 120.0


def as_plan(lp: Any) -> Plan:
    """The guard Plan of a LaunchPlan, with its refusal (a launch refused before any target is planned)."""
    plan: Plan = lp.plan
    if lp.refused and not plan.refused:
        plan = dataclasses.replace(plan, refused=lp.refused)
    return plan


def outcome_result(out: Any) -> ActionResult:
    ok = bool(getattr(out, "ok", False))
    outcome = getattr(out, "outcome", None)
    refused = getattr(out, "refused", None) or getattr(outcome, "refused", None)
    detail = refused or getattr(out, "detail", None) or getattr(outcome, "detail", None) or ""
    return ActionResult(ok, str(detail))


class LiveBackend:
    """The Backend of a real rig: one LiveRig, its prober, its guard and its audit trail."""

    def __init__(self, rig: RigConfig) -> None:
        self.rig = rig
        self.live: Any = None
        self.log_tail = LOG_TAIL_LINES
        # The sides of one host share a phase, FULL_PER_BEAT at a time: the full polls of a beat then share
        # one process table (a host's scan, and its token index, is made once a beat it is asked).
        by_host = sorted(rig.sides, key=lambda n: (rig.sides[n].evaluator.host, rig.sides[n].server.host))
        self._phase = {name: i // FULL_PER_BEAT for i, name in enumerate(by_host)}
        self._full_every = full_every(len(rig.sides))
        self._beat_every = beat_every(len(rig.sides))
        self._with_job: dict[str, tuple[SideSnapshot, dict | None, SideSnapshot]] = {}
        self._stack = AsyncExitStack()
        self._audit = Audit(rig.state_dir)
        self._audit_key: tuple[float, int] | None = None
        self._feed = AuditFeed(self._audit.read)
        self._audit_tasks: set[asyncio.Task] = set()
        self._audit_seen: dict[str, tuple] = {}   # host -> (mtime, size) of its audit file at the last tail
        # Planner values richer than the Plan (a LaunchPlan), kept to execute exactly what was shown.
        self._planned: dict[int, Any] = {}

    async def start(self) -> None:
        from ops.rig import open_rig
        self.live = await self._stack.enter_async_context(open_rig(self.rig))

    async def close(self) -> None:
        for task in list(self._audit_tasks):
            task.cancel()
        await asyncio.gather(*self._audit_tasks, return_exceptions=True)
        await self._stack.aclose()

    @property
    def guard(self) -> Guard:
        return Guard(self.live.hosts, self._audit)

    async def probe(self, side: str, rpc: bool | None = None) -> SideSnapshot:
        self._start_remote_audit(side)
        # The pane shows HUNG as the side's supervisor measured it, as `status` does (display only: the
        # plans of `h` and the guard measure afresh).
        # A served side's process table, chain and server are read on its full beats (falls_on); the beats
        # between read its heartbeat and log tail (Prober._light): what moves every second on a running side.
        # The window reaches past the side's next full beat, so a late beat never turns light into full.
        p = self.rig.poll_s
        beat = int(time.monotonic() // p) if p > 0 else 0
        phase = self._phase[side]
        light = 0.0 if falls_on(beat, phase, self._full_every) else (self._full_every + 0.5) * p
        due = falls_on(beat, phase, self._beat_every)
        if self.rig.engine == "process":
            snap = await self.live.prober.side(side, rpc=rpc, tail=self.log_tail, light_within_s=light,
                                                   beat_due=due)
            return with_supervisor_measure(snap, time.time())
        # First: it follows the job's ports before the probe. A cadence poll takes the last squeue while the
        # next one runs; `g` and a plan's poll wait for a new one.
        job = await self.live.job_of(side, display_within_s(self.rig.poll_s) if rpc is None else 0.0)
        snap = await self.live.prober.side(side, rpc=rpc, tail=self.log_tail, light_within_s=light,
                                                   beat_due=due)
        shown = self._with_job.get(side)
        if shown is not None and shown[0] is snap and shown[1] == job:
            return shown[2]   # nothing read and the job as it was: the very snapshot shown (the app skips it)
        out = with_supervisor_measure(dataclasses.replace(snap, job=job), time.time())
        self._with_job[side] = (snap, job, out)
        return out

    def quiet_beat(self, side: str, beat: int) -> bool:
        """A cadence poll of side on this beat would read nothing (a served side off its full and heartbeat
        beats: Prober.side returns the snapshot shown). The app does not wake a side's loop for such a beat:
        on a rig of tens of sides half the loops' wake-ups were those (timer, event, timeout, probe, hold).
        A job's side too: its row shows the job as at its last read, as it shows its heartbeat's age."""
        if not self.live.prober.served(side):
            return False
        phase = self._phase[side]
        return not falls_on(beat, phase, self._full_every) and not falls_on(beat, phase, self._beat_every)

    async def log_lines(self, side: str, n: int) -> list[str] | None:
        from ops.platform.files import tail_lines
        sc = self.rig.sides[side]
        return await tail_lines(self.live.hosts[sc.evaluator.host], sc.evaluator.path(sc.evaluator.log), n,
                                10.0, max_bytes=64 * 1024)

    def _start_remote_audit(self, side: str) -> None:
        """Beside the probe, never in its way: a slow or lost host delays only its own audit lines."""
        host = self.live.hosts.get(self.rig.sides[side].evaluator.host)
        if host is None or host.is_local or not self._feed.due(host.name):
            return   # no task a poll: most polls of a beat find their host's tail read not long ago
        task = asyncio.ensure_future(self._remote_audit(host))
        self._audit_tasks.add(task)
        task.add_done_callback(self._audit_tasks.discard)

    async def _remote_audit(self, host: Host) -> None:
        """A remote evaluator host's supervisor audits there: its tail joins the feed (AuditFeed). The file
        only grows, so a stat that finds its size and mtime as at the last tail (one the host's agent
        pushed, no round trip) means no new line: the tail, up to 256 KB over ssh, is not read again."""
        from ops.platform.files import stat_file, tail_lines
        path = str(self._audit.path)
        try:
            st = await stat_file(host, path, 10.0, display_within_s(self.rig.poll_s))
            if st.error is None and not st.exists:
                # No supervisor has audited on that host yet: nothing to tail until the file appears (a
                # host of evaluators that never ran asked for a missing file twice a second otherwise).
                self._audit_seen[host.name] = ("absent",)
                return
            key = (st.mtime, st.size) if st.error is None else None
            if key is not None and self._audit_seen.get(host.name) == key:
                return
            lines = await tail_lines(host, path, REMOTE_TAIL_LINES, 10.0, max_bytes=REMOTE_TAIL_BYTES)
        except Exception:   # a host object that failed oddly: its lines come with a later look
            return
        if lines is not None and key is not None:
            self._audit_seen[host.name] = key
        self._feed.remote_lines(lines)

    def audit(self) -> list[dict[str, Any]] | None:
        try:
            st = os.stat(self._audit.path)
        except FileNotFoundError:
            st = None
        key = (st.st_mtime, st.st_size) if st is not None else None
        if key != self._audit_key:
            # First the local file (read after any remote tail): a shared state dir's lines are then known.
            self._audit_key = key
            self._feed.local_changed()
        return self._feed.records()

    # ----- ports -------------------------------------------------------------------------------------
    async def scan_ports(self) -> PortsReport:
        scan = await ports.scan_ports(self.live)
        return ports_report(self.rig, scan)

    # ----- guarded actions ---------------------------------------------------------------------------
    async def plan(self, action: str, side: str) -> Plan:
        if action == "launch":
            lp = await launch.plan_launch(self.live, side)
            plan = launch_view(lp)
            self._planned[id(plan)] = lp
            return plan
        if action == "reclaim":
            return await reclaim.plan_reclaim(self.live, side)
        if action == "adapter":
            return await adapter.plan_adapter_poll(self.live, side)
        if action == "restart-server":
            # One forced rpc probe on top of the poll's history: HUNG needs K silent probes over T s.
            snap = await self.live.prober.side(side, rpc=True)
            if snap.server.verdict.state.value == "DEAD":
                return await adapter.plan_adapter_poll(self.live, side)
            plan = restart_server.plan_stop_hung(snap, self.rig.sides[side].server.host)
            self._planned[id(plan)] = snap
            return plan
        raise Unavailable(f"no such action {action!r}")

    async def execute(self, action: str, plan: Plan, conf: Confirmation,
                      report: Callable[[str], None] | None = None) -> ActionResult:
        planned = self._planned.pop(id(plan), None)
        if action == "launch":
            if planned is None:
                raise Unavailable("the launch plan was not kept; plan again")
            return outcome_result(await launch.execute_launch(self.live, planned, conf))
        if action == "reclaim":
            # The plan the operator saw goes back: reclaim() re-asks for clients right before acting.
            return outcome_result(await reclaim.reclaim(self.live, plan.side, conf, plan=plan))
        if action == "restart-server":
            res = await restart_server.restart_server(self.live, plan.side, conf, snap=planned)
            return ActionResult(res.ok, res.refused or res.detail)
        if action == "adapter":

            def on_event(ev: Any) -> None:
                if report is not None:
                    which = "" if ev.adapter is None else f" adapter {ev.adapter}"
                    report(f"{plan.side} adapter{which}: {ev.kind} {ev.detail}")

            rep = await adapter.poll_adapters(self.live, plan.side, conf, on_event=on_event, plan=plan)
            return adapter_result(rep)
        raise Unavailable(f"no such action {action!r}")

    def recovery(self, side: str) -> LiveRecovery:
        return LiveRecovery(self, side)

    async def resources(self, snaps: dict[str, Any]) -> list[str]:
        """The resource guards' warnings (issue 21) beside the latest snapshots."""
        from ops.probes.resources import resources_now
        return (await resources_now(self.live, snaps)).warnings()


def launch_view(lp: Any) -> Plan:
    """The guard plan of a LaunchPlan with what the operator needs to judge it: the checks, the resume
    decision and the exact harness command (the launch refusal, if any, disables Proceed)."""
    base = as_plan(lp)
    checks = tuple(f"{c.name}: {c.status} {c.detail}" for c in getattr(lp, "checks", ()))
    decision = getattr(lp, "decision", None)
    resume = (f"resume {decision.resume}: {decision.reason}",) if decision is not None else ()
    backup = (f"backup: {lp.backup}",) if getattr(lp, "backup", None) else ()
    refused = base.refused or getattr(lp, "refused", None)
    return dataclasses.replace(base, evidence=base.evidence + checks + resume + backup, refused=refused,
                               action=base.action or " ".join(getattr(lp, "harness_argv", ())))


def adapter_result(rep: Any) -> ActionResult:
    acc = rep.accepted
    tries = "; ".join(f"{t.adapter}: {t.verdict}" + (f" (+{t.delta_mb} MiB)" if t.delta_mb is not None else "")
                      for t in rep.tries)
    if acc is not None:
        return ActionResult(True, f"adapter {acc.adapter} accepted ({acc.gpu_name}, +{acc.delta_mb} MiB); "
                                  f"tries {tries}")
    why = rep.refused or rep.stopped_on or "no candidate rendered"
    return ActionResult(False, f"{why}; tries {tries or 'none'}")


def _step_status(step: Any) -> str:
    return {"done": "ok", "keep": "ok", "ok": "ok", "skipped": "skipped", "refused": "refused",
            "blocked": "refused"}.get(step.status, "failed")


class LiveRecovery:
    """The wizard's steps over ops/actions/recovery.py (recovery_plan, execute_kill, server_step, wait_fresh) and
    ops/actions/launch.py for the relaunch, which the wizard confirms in its own modal."""

    def __init__(self, backend: LiveBackend, side: str) -> None:
        self.backend = backend
        self.side = side
        self.rec: Any = None
        self.killed_at: float | None = None
        self.lp: Any = None

    async def verdict(self) -> StepOutcome:
        self.rec = await recovery.recovery_plan(self.backend.live, self.side)
        rec = self.rec
        plan = rec.kill_plan
        if rec.refused and not plan.refused:
            plan = dataclasses.replace(plan, refused=rec.refused)
        first = rec.steps[0] if rec.steps else None
        detail = " · ".join(f"{k} {v}" for k, v in dict(rec.verdict).items())
        if first is not None and first.detail:
            detail = f"{detail}; {first.detail}"
        if rec.refused:
            return StepOutcome("refused", f"{detail}; refused: {rec.refused}", plan)
        return StepOutcome("ok", detail, plan)

    async def kill(self, plan: Plan, conf: Confirmation) -> StepOutcome:
        self.killed_at = time.time()
        res = await recovery.execute_kill(self.backend.live, self.rec, conf)
        status = "ok" if res.ok else ("refused" if res.step.status == "refused" else "failed")
        return StepOutcome(status, res.step.detail)

    async def server(self) -> StepOutcome:
        step = await recovery.server_step(self.backend.live, self.side)
        return StepOutcome(_step_status(step), step.detail)

    async def relaunch(self) -> StepOutcome:
        lp = None
        # The killed chain may take a moment to leave the process table (as ops.actions.recovery.relaunch does).
        for _ in range(12):
            lp = await launch.plan_launch(self.backend.live, self.side)
            if lp.allowed or not any(c.name == "running" and c.status != "ok" for c in lp.checks):
                break
            await asyncio.sleep(0.25)
        self.lp = lp
        assert lp is not None  # the loop ran at least once
        if not lp.allowed:
            return StepOutcome("refused", f"the relaunch is refused: {lp.refused}")
        return StepOutcome("confirm", f"resume {lp.decision.resume}: {lp.decision.reason}", launch_view(lp))

    async def execute(self, plan: Plan, conf: Confirmation) -> StepOutcome:
        res = await launch.execute_launch(self.backend.live, self.lp, conf)
        r = outcome_result(res)
        return StepOutcome("ok" if r.ok else "failed", r.detail)

    async def wait_fresh(self, report: Callable[[str], None]) -> StepOutcome:
        # Short waits in a loop, so the wizard's mark shows the live age instead of a frozen "waiting".
        deadline = time.monotonic() + FRESH_WAIT_S
        while True:
            hb, step = await recovery.wait_fresh(self.backend.live, self.side, 2.0, since=self.killed_at)
            if step.status == "done":
                return StepOutcome("ok", step.detail)
            age = "?" if hb is None or hb.age_s is None else f"{hb.age_s:.0f} s"
            report(f"heartbeat {hb.beat.value if hb else 'UNKNOWN'} (log {age} old), waiting…")
            if time.monotonic() >= deadline:
                return StepOutcome("failed", step.detail)


_KIND_WORD = {"reserved": "RESERVED", "in-use": "IN USE", "shared": "SHARED"}


def ports_report(rig: RigConfig, scan: Any) -> PortsReport:
    """PortScan (ops/probes/ports.py) → the words each pane shows and the lines of the report."""
    status: dict[str, dict[int, str]] = {}
    lines: list[str] = []
    ranges = getattr(scan, "ranges", ())
    lines.append("reserved ranges: " + (", ".join(f"[{a}, {b}]{'*' if adm else ''}" for a, b, adm in ranges)
                                        or "none"))
    conflicts = 0
    for name, sp in scan.sides.items():
        words = {p: "ok" for p in sp.planned}
        for u in sp.unknown:
            m = re.match(r"port (\d+)", u)
            if m and int(m.group(1)) in words:
                words[int(m.group(1))] = "UNKNOWN"
        for c in sp.conflicts:
            words[c.port] = _KIND_WORD.get(c.kind, c.kind.upper())
        conflicts += len(sp.conflicts)
        status[name] = words
        lines.append(f"side {name}: {sp.verdict}  planned {' '.join(str(p) for p in sp.planned)}")
        lines += [f"  port {c.port} ({c.role}): {_KIND_WORD.get(c.kind, c.kind)} — {c.reason}" for c in sp.conflicts]
        lines += [f"  UNKNOWN: {u}" for u in sp.unknown]
        if sp.suggestion:
            lines.append(f"  suggestion: rpc {sp.suggestion[0]} (+1, +2), tm {sp.suggestion[3]}")
    for ev in scan.evidence_lines():
        lines.append(f"evidence: {ev}")
    return PortsReport(status, tuple(lines), conflicts)


# ----- entry ---------------------------------------------------------------------------------------------

class _Stop(Exception):
    """A SIGTERM/SIGHUP that came before (or after) the app's own handlers: unwind through finally."""


def _raise_stop(signum: int, _frame: Any) -> None:
    raise _Stop(signal.Signals(signum).name)


def _launch_demo_sides(startup: sim.Startup) -> None:
    """Wait for the demo's servers, then launch its sides (plan, guard, detached harness)."""
    from console.cli.sim import start_sides
    try:
        startup.wait()
    except (RuntimeError, TimeoutError) as e:
        # The panes show the servers as they are; the sides are not launched against dead ones.
        print(f"carla-console --demo: {e}", file=sys.stderr)
        return
    problems = asyncio.run(start_sides(startup.rig_yaml))
    for p in problems:
        print(f"carla-console --demo: {p}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from console.tui.keymap import KeymapError, default_keymap_path, load_keymap
    from ops.config import default_config_path, load_config

    keymap_arg = getattr(args, "keymap", None)
    try:
        keymap = load_keymap(Path(keymap_arg) if keymap_arg else default_keymap_path(), required=bool(keymap_arg))
    except KeymapError as e:
        print(f"carla-console: keymap: {e}", file=sys.stderr)
        return 2

    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGHUP, signal.SIGTERM)}
    demo_dir: Path | None = None
    launcher: threading.Thread | None = None
    try:
        if getattr(args, "demo", False):
            from sim import rig as sim
            demo_dir = Path(tempfile.mkdtemp(prefix="carla-console-demo-"))
            print(f"carla-console --demo: starting a simulated rig in {demo_dir} …", file=sys.stderr)
            # The first frame does not wait for the fake servers: they come up (and then the sides
            # launch) behind it, and the operator sees them go from absent to running, as on a real rig.
            # They start at a lower CPU priority: on a small machine they would otherwise slow the very
            # console that is to show them (stand-ins for servers that run on another host anyway).
            startup = sim.start(demo_dir, nice=10)
            config_path = startup.rig_yaml
            launcher = threading.Thread(target=_launch_demo_sides, args=(startup,), daemon=True,
                                        name="demo-launch")
            launcher.start()
        else:
            config_path = Path(args.config) if args.config else default_config_path()
        rig = load_config(config_path)
        return run_app(LiveBackend(rig), read_only=bool(getattr(args, "read_only", False)), keymap=keymap)
    except _Stop:
        return 0
    finally:
        if demo_dir is not None:
            # The demo owns its sim rig: stop exactly what up() started, whatever way the app ended.
            for s in previous:
                signal.signal(s, signal.SIG_IGN)
            try:
                from sim import rig as sim
                if launcher is not None:
                    launcher.join(timeout=60)   # a harness being started must be recorded before down()
                sim.down(demo_dir)
            finally:
                shutil.rmtree(demo_dir, ignore_errors=True)
        for s, h in previous.items():
            signal.signal(s, h)


def run_app(backend: Any, read_only: bool = False, keymap: dict[str, str] | None = None) -> int:
    from console.tui.app import ConsoleApp

    app = ConsoleApp(backend, read_only=read_only, keymap=keymap)
    code = app.run()
    # Closing the loop reset SIGHUP/SIGTERM to their defaults: put ours back at once, so a signal during
    # the demo's teardown still unwinds through run()'s finally instead of killing the process there.
    for s in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, _raise_stop)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    t0 = time.time()
    sys.exit(run(argparse.Namespace(config=sys.argv[1] if len(sys.argv) > 1 else None, read_only=False,
                                    demo=False)))
