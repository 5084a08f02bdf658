"""`recover SIDE [--dry-run] [--json] [--yes]`: guided recovery of a hung side (ops/actions/recovery.py).

--dry-run prints the verdict, the kill plan (outer → inner) and the seven steps, and exits 3 when the
recovery would be refused (heartbeat FRESH, anything UNKNOWN, ...), 0 when it would proceed.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from console.cli.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, print_json
from console.cli.tty_confirm import confirm
from ops.actions.recovery import RecoveryPlan, RecoveryRun, Step, recover, recovery_plan
from ops.model import RigConfig
from ops.rig import open_rig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    if args.side not in rig.sides:
        print(f"carla-console recover: no side {args.side!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
        return EXIT_USAGE
    if rig.engine != "process":
        return asyncio.run(_run_job(rig, args))
    return asyncio.run(_run(rig, args))


async def _run_job(rig: RigConfig, args: argparse.Namespace) -> int:
    """A scheduled side: cancel its job by exact id (heartbeat STALE) and submit the side again."""
    from ops.engines import engine_for
    async with open_rig(rig) as live:
        engine = engine_for(rig, live.hosts)
        live.follow_jobs()
        snap = await live.prober.side(args.side, rpc=False)
        plan = await engine.stop_plan(live, args.side, heartbeat=snap.heartbeat.beat.value)
        if args.dry_run:
            if args.json:
                print_json(plan.to_json())
            else:
                from console.cli.tty_confirm import render_plan
                print("\n".join(render_plan(plan)))
            return EXIT_REFUSED if plan.refused else EXIT_OK
        conf = confirm(plan, args.yes)
        if not conf.proceed:
            return EXIT_REFUSED
        outcome, started = await engine.recover(live, args.side, conf, plan)
    if args.json:
        print_json({**outcome.to_json(), "replaced_by": [{"side": s.side, "ok": s.ok, "detail": s.detail}
                                                          for s in started]})
    else:
        print(outcome.detail or outcome.refused)
        for s in started:
            print(f"{s.side}: {'submitted' if s.ok else 'not submitted'}: {s.detail}")
    return EXIT_OK if outcome.ok and all(s.ok for s in started) else EXIT_REFUSED


def _print_steps(side: str, steps: tuple[Step, ...], refused: str | None) -> None:
    print(f"recover side {side}" + (f": REFUSED: {refused}" if refused else ""))
    for i, s in enumerate(steps, 1):
        print(f"  {i}. {s.name:10} {s.status:13} {s.detail}")


def _show_plan(plan: RecoveryPlan, as_json: bool) -> None:
    if as_json:
        print_json(plan.to_json())
        return
    _print_steps(plan.side, plan.steps, plan.refused)
    for t in plan.kill_plan.targets:
        print(f"     {t.role:9} {t.pid:>7}  {' '.join(t.cmdline or ('<unreadable>',))[:150]}")


def _show_run(res: RecoveryRun, as_json: bool) -> None:
    if as_json:
        print_json(res.to_json())
        return
    _print_steps(res.plan.side, res.steps, res.plan.refused)
    print("recovered" if res.ok else "not recovered: see the steps above")


async def _run(rig: RigConfig, args: argparse.Namespace) -> int:
    async with open_rig(rig) as live:
        plan = await recovery_plan(live, args.side)
        if args.dry_run or plan.refused:
            _show_plan(plan, args.json)
            return EXIT_OK if plan.allowed else EXIT_REFUSED
        conf = confirm(plan.kill_plan, args.yes)
        res = await recover(live, plan, conf)
        _show_run(res, args.json)
        return EXIT_OK if res.ok else EXIT_REFUSED
