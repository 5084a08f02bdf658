"""Adopt a still-running evaluator whose supervisor died (kill -9, OOM): a new harness watches it instead
of leaving it unsupervised, continuing the old state (attempts, budgets, retired routes never reset).

Through the guard (Op.ADOPT: the side's evaluator ALIVE, no harness of the side alive), audited; the new
harness is `carla-console -c RIG harness SIDE --adopt`, detached like a launched one.
"""
from __future__ import annotations

from ops.actions import remote
from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, make_plan
from ops.actions.launch import harness_argv, harness_log, side_snapshot, wait_harness
from ops.probes.harness_state import HarnessState, side_dir


async def plan_adopt(live, side: str) -> Plan:
    rig = live.config
    sc = rig.sides[side]
    snap, _ = await side_snapshot(live, side)
    ev = snap.evaluator
    harness = "UNKNOWN" if ev.verdict.state.value == "UNKNOWN" else ("ALIVE" if ev.harness_alive else "DEAD")
    verdicts = {"evaluator": ev.verdict.state.value, "harness": harness}
    host = live.hosts[sc.evaluator.host]
    argv = [*(harness_argv(rig, side) if host.is_local else remote.harness_argv(rig, side, host.name)), "--adopt"]
    # A remote evaluator's new supervisor is started on its host, like a launched one (ops/actions/remote.py).
    precondition = None if host.is_local else remote.refusal(rig, host, sc)
    return make_plan(Op.ADOPT, side, sc.evaluator.host, (), verdicts,
                     tuple(e.line() for e in ev.verdict.evidence),
                     action=f"start a supervisor for the running evaluator {ev.pid}: `{' '.join(argv)}`",
                     precondition=precondition)


async def adopt(live, side: str, conf: Confirmation, plan: Plan | None = None, wait_s: float = 30.0) -> Outcome:
    rig = live.config
    sc = rig.sides[side]
    plan = plan or await plan_adopt(live, side)

    host = live.hosts[sc.evaluator.host]

    async def remote_action(_plan: Plan) -> tuple[bool, str]:
        argv = [*remote.harness_argv(rig, side, host.name), "--adopt"]
        pid, st = await remote.start_harness(host, rig, side, argv, sc.evaluator.cwd, wait_s)
        if pid is None or not isinstance(st, HarnessState):
            return False, f"harness {pid} on {host.name}: {st}" if pid else str(st)
        if st.status in ("refused", "failed", "gave_up"):
            return False, f"harness {pid} on {host.name} {st.status}: {st.detail}"
        return True, f"harness {pid} on {host.name} adopted the run (attempt {st.attempt})"

    async def action(_plan: Plan) -> tuple[bool, str]:
        from ops.platform.local import spawn_detached
        log = harness_log(rig, side)
        side_dir(rig, side).mkdir(parents=True, exist_ok=True)
        pid = spawn_detached([*harness_argv(rig, side), "--adopt"], cwd=sc.evaluator.cwd, log_path=log)
        st = await wait_harness(rig, side, pid, wait_s)
        if not isinstance(st, HarnessState):
            return False, f"harness {pid} started but has not reported within {wait_s:.0f} s ({st}); see {log}"
        if st.status in ("refused", "failed", "gave_up"):
            return False, f"harness {pid} {st.status}: {st.detail}"
        return True, f"harness {pid} adopted the run (attempt {st.attempt}); log {log}"

    return await Guard(live.hosts, Audit(rig.state_dir)).execute(plan, conf, action=action if host.is_local else remote_action)
