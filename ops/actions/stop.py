"""Stop a side's run by the operator's word: the whole chain (harness → wrapper → evaluator → children),
outer → inner, through the guard (Op.STOP_RUN). The harness goes first, so it starts no new attempt; it
writes `stopped` on SIGTERM and the side reads STOPPED (ops/probes/lifecycle.py). The server is left as
it is (IDLE afterwards: `reclaim` stops it).
"""
from __future__ import annotations

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, Target, make_plan
from ops.actions.launch import side_snapshot


async def plan_stop(live, side: str) -> Plan:
    sc = live.config.sides[side]
    snap, _tables = await side_snapshot(live, side)
    chain = snap.evaluator.chain
    host = sc.evaluator.host
    targets = [Target.of(host, m.proc, m.role) for m in chain.members]
    verdicts = {"evaluator": snap.evaluator.verdict.state.value}
    evidence = tuple(e.line() for e in snap.evaluator.verdict.evidence)
    return make_plan(Op.STOP_RUN, side, host, targets, verdicts, evidence,
                     action=f"stop side {side}'s run: TERM outer → inner (harness first: no new attempt), grace, "
                            "KILL what is left; each pid re-checked by start time; the server is kept",
                     precondition=None if targets else f"side {side} has no harness or evaluator running")


async def stop(live, side: str, conf: Confirmation, plan: Plan | None = None) -> Outcome:
    guard = Guard(live.hosts, Audit(live.config.state_dir))
    return await guard.execute(plan or await plan_stop(live, side), conf)
