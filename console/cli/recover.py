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
    return asyncio.run(_run(rig, args))


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
