"""Restart a side's server that is HUNG (process and port up, RPC silent: ops/probes/server.py) or DEAD.

    measure   forced RPC probes, `hung_probes` of them spread over `hung_after_s`, until the server
              answers (ALIVE: nothing to do), is gone (DEAD), or is HUNG; UNKNOWN (could not measure)
              refuses, as everywhere
    stop      HUNG only: the launcher and the shipping process, outer → inner, each by (pid, create time),
              through the guard (Op.STOP_HUNG_SERVER: server HUNG, this side's evaluator DEAD)
    start     adapter polling (its own plan and guard pass, Op.ADAPTER_POLL: server DEAD)

The same path serves the operator (`restart-server SIDE`, the TUI) and the supervisor (its policy's
confirmation); a refusal at any step has its audit line.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, Target, make_plan
from ops.actions.launch import fresh_tables, start_server
from ops.actions.reclaim import _order
from ops.probes.prober import SideSnapshot
from ops.probes.server import main_server, rpc_marker
from ops.tristate import State


async def measure_server(live, side: str) -> SideSnapshot:
    """Forced RPC probes until the verdict is not a first silence: ALIVE, DEAD, HUNG or UNKNOWN."""
    sc = live.config.sides[side].server
    gap = sc.hung_after_s / max(1, sc.hung_probes - 1)
    snap = await live.prober.side(side, rpc=True, tables=await fresh_tables(live))
    for _ in range(max(0, sc.hung_probes - 1) + 1):
        silence = live.prober.silence(side)
        if snap.server.verdict.state is not State.UNKNOWN or silence is None:
            return snap
        await asyncio.sleep(gap)
        snap = await live.prober.side(side, rpc=True, tables=await fresh_tables(live))
    return snap


# The guard's verify already waits for the stop targets' whole thread groups (a zombie leader with live
# threads reads Zl, not gone). DEAD needs more: no process with the marker *and* the port refusing, and a
# descendant that inherited the listening socket keeps it accepting after the targets are gone. So the
# restart reads the server again until DEAD, within a bound; anything else refuses it.
SETTLE_S = 15.0


async def dead_after_stop(live, side: str, within_s: float = SETTLE_S) -> SideSnapshot:
    """The server read again until DEAD, or until within_s has passed (then the last reading, whatever it
    says: anything but DEAD refuses the restart)."""
    deadline = time.monotonic() + within_s
    while True:
        snap = await live.prober.side(side, rpc=True, tables=await fresh_tables(live))
        if snap.server.verdict.state is State.DEAD or time.monotonic() >= deadline:
            return snap
        await asyncio.sleep(0.2)


def plan_stop_hung(snap: SideSnapshot, host: str) -> Plan:
    main = main_server(list(snap.server.procs))
    targets = [Target.of(host, p, "server" if main is not None and p.pid == main.pid else "launcher")
               for p in _order(snap.server.procs)]
    verdicts = {"server": snap.server.verdict.state.value, "evaluator": snap.evaluator.verdict.state.value}
    evidence = (f"server {verdicts['server']}: {snap.server.verdict.summary}",
                *(e.line() for e in snap.server.verdict.evidence),
                f"evaluator {verdicts['evaluator']}: {snap.evaluator.verdict.summary}")
    precondition = None
    if snap.evaluator.verdict.state is State.ALIVE:
        precondition = (f"side {snap.name}'s evaluator is running on this server: stop or recover it first")
    return make_plan(Op.STOP_HUNG_SERVER, snap.name, host, targets, verdicts, evidence,
                     action=f"stop the hung server of side {snap.name} on {host} "
                            f"({rpc_marker(snap.side.server.rpc_port)}): TERM outer → inner, grace, KILL; "
                            "each pid re-checked by start time; then adapter polling",
                     precondition=precondition)


@dataclass(frozen=True)
class RestartResult:
    verdict: str                  # the server's verdict that decided (ALIVE, DEAD, HUNG, UNKNOWN)
    ok: bool
    refused: str | None
    detail: str
    stop: Outcome | None = None

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "ok": self.ok, "refused": self.refused, "detail": self.detail,
                "stop": None if self.stop is None else {**self.stop.to_json(), "plan": self.stop.plan.to_json()}}


async def restart_server(live, side: str, conf: Confirmation, *, snap: SideSnapshot | None = None,
                         guard: Guard | None = None) -> RestartResult:
    rig = live.config
    sc = rig.sides[side]
    guard = guard or Guard(live.hosts, Audit(rig.state_dir))
    snap = snap or await measure_server(live, side)
    state = snap.server.verdict.state
    if state is State.HUNG:
        plan = plan_stop_hung(snap, sc.server.host)
        out = await guard.execute(plan, conf)
        if not out.ok:
            return RestartResult("HUNG", False, out.refused, out.refused or out.detail, out)
        after = await dead_after_stop(live, side)
        if after.server.verdict.state is not State.DEAD:
            why = f"after the stop the server reads {after.server.verdict.state.value}: {after.server.verdict.summary}"
            return RestartResult("HUNG", False, None, why, out)
        ok, detail = await start_server(live, side, conf)
        return RestartResult("HUNG", ok, None, f"stopped ({out.detail}); {detail}", out)
    if state is State.DEAD:
        ok, detail = await start_server(live, side, conf)
        return RestartResult("DEAD", ok, None, detail)
    # ALIVE (nothing to restart) or UNKNOWN (cannot measure): refused, and audited as a refusal.
    why = (f"server ALIVE ({snap.server.verdict.summary}): nothing to restart" if state is State.ALIVE else
           f"server UNKNOWN ({snap.server.verdict.summary}): cannot measure, so nothing is stopped (fail-closed)")
    out = await guard.execute(plan_stop_hung(snap, sc.server.host), conf)
    return RestartResult(state.value, False, why, out.refused or why, out)
