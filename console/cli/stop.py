"""`stop SIDE [--yes] [--json]`: stop a side's run (harness, wrapper, evaluator) through the guard.

Exit 0 stopped, 1 executed but something survived, 3 refused (nothing running, UNKNOWN, no confirmation).
"""
from __future__ import annotations

import asyncio
import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_REFUSED, print_json
from console.cli.tty_confirm import confirm
from ops.actions.guard import Outcome
from ops.actions.stop import plan_stop, stop
from ops.model import RigConfig
from ops.rig import open_rig


async def _run(rig: RigConfig, args) -> Outcome:
    async with open_rig(rig) as live:
        plan = await plan_stop(live, args.side)
        return await stop(live, args.side, confirm(plan, args.yes), plan=plan)


def run(rig: RigConfig, args) -> int:
    if args.side not in rig.sides:
        print(f"carla-console: unknown side {args.side!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
        return EXIT_REFUSED
    out = asyncio.run(_run(rig, args))
    if getattr(args, "json", False):
        print_json({**out.to_json(), "plan": out.plan.to_json()})
    elif out.refused:
        print(f"refused: {out.refused}")
    else:
        for t in out.targets:
            print(f"  {t.target.role} {t.target.pid}: {t.outcome}{' ' + t.detail if t.detail else ''}")
        print("stopped" if out.ok else "incomplete: see above")
    if out.refused:
        return EXIT_REFUSED
    return EXIT_OK if out.ok else EXIT_FINDING
