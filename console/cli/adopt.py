"""`adopt SIDE [--yes] [--json]`: a new supervisor for a running evaluator whose harness died.
Exit 0 adopted, 1 started but failed, 3 refused (no evaluator, a harness alive, UNKNOWN, no confirmation)."""
from __future__ import annotations

import asyncio
import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_REFUSED, print_json
from console.cli.tty_confirm import confirm
from ops.actions.adopt import adopt, plan_adopt
from ops.actions.guard import Outcome
from ops.model import RigConfig
from ops.rig import open_rig


async def _run(rig: RigConfig, args) -> Outcome:
    async with open_rig(rig) as live:
        plan = await plan_adopt(live, args.side)
        return await adopt(live, args.side, confirm(plan, args.yes), plan=plan)


def run(rig: RigConfig, args) -> int:
    if args.side not in rig.sides:
        print(f"carla-console: unknown side {args.side!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
        return EXIT_REFUSED
    out = asyncio.run(_run(rig, args))
    if getattr(args, "json", False):
        print_json({**out.to_json(), "plan": out.plan.to_json()})
    else:
        print(f"refused: {out.refused}" if out.refused else out.detail)
    if out.refused:
        return EXIT_REFUSED
    return EXIT_OK if out.ok else EXIT_FINDING
