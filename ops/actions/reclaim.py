"""Reclaim an IDLE side's server: a server rendering for nobody (its evaluator finished or absent) slowed
the other side 3× at 98 % GPU. Stop exactly that server — the launcher and the shipping server, outer →
inner, each by (pid, start time) — through the guard (Op.RECLAIM).

Refused while the side's evaluator lives (or its harness, which would restart it onto this server), while
any client holds a connection to the RPC port (someone else may be driving it), and on any UNKNOWN.
"""
from __future__ import annotations

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, Target, make_plan
from ops.platform.procs import Proc
from ops.platform.verbs import clients_connected
from ops.probes.server import main_server, rpc_marker
from ops.rig import LiveRig


def _order(procs: tuple[Proc, ...]) -> list[Proc]:
    """Outer → inner: a process before any process it started (the launcher before the server)."""
    pids = {p.pid for p in procs}
    by_pid = {p.pid: p for p in procs}

    def depth(p: Proc) -> int:
        d, cur, seen = 0, p, set()
        while cur.ppid in pids and cur.ppid not in seen:
            seen.add(cur.ppid)
            cur = by_pid[cur.ppid]
            d += 1
        return d

    return sorted(procs, key=lambda p: (depth(p), p.create_time, p.pid))


async def plan_reclaim(live: LiveRig, side: str) -> Plan:
    rig = live.config
    sc = rig.sides[side]
    host = live.hosts[sc.server.host]
    snap = await live.prober.side(side, rpc=True)
    n, cev = await clients_connected(host, sc.server.rpc_port, sc.server.probe_timeout_s)
    clients = "UNKNOWN" if n is None else ("NONE" if n == 0 else "SOME")
    verdicts = {"server": snap.server.verdict.state.value, "evaluator": snap.evaluator.verdict.state.value,
                "clients": clients}
    precondition = None
    if snap.evaluator.harness_alive:
        precondition = ("the side's harness is alive: it would start an evaluator onto this server "
                        "(stop the harness first)")
    main = main_server(list(snap.server.procs))
    targets = [Target.of(host.name, p, "server" if main is not None and p.pid == main.pid else "launcher")
               for p in _order(snap.server.procs)]
    evidence = (f"server {verdicts['server']}: {snap.server.verdict.summary}",
                f"evaluator {verdicts['evaluator']} ({snap.evaluator.phase}): {snap.evaluator.verdict.summary}",
                cev.line())
    action = (f"stop the server of side {side} on {host.name} ({rpc_marker(sc.server.rpc_port)}): TERM outer → "
              "inner, grace, KILL what is left; each pid re-checked by start time")
    return make_plan(Op.RECLAIM, side, host.name, targets, verdicts, evidence, action, precondition)


async def reclaim(live: LiveRig, side: str, conf: Confirmation, plan: Plan | None = None) -> Outcome:
    """Execute a reclaim plan (a fresh one when none is given) through the guard."""
    guard = Guard(live.hosts, Audit(live.config.state_dir))
    if plan is None:
        plan = await plan_reclaim(live, side)
    elif plan.allowed:
        # A plan shown earlier (the TUI's dialog): a client may have connected since. Ask again, right now.
        sc = live.config.sides[side]
        n, cev = await clients_connected(live.hosts[sc.server.host], sc.server.rpc_port, sc.server.probe_timeout_s)
        if n != 0:
            plan = make_plan(plan.op, plan.side, plan.host, plan.targets,
                             {**plan.verdicts, "clients": "UNKNOWN" if n is None else "SOME"},
                             plan.evidence + (cev.line(),), plan.action)
    return await guard.execute(plan, conf)
