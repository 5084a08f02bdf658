"""What every guarded side command shares: the side named, the plan confirmed (a terminal's answer or
`--yes`), the act, the outcome printed, the exit code (0 done, 1 acted but incomplete, 3 refused)."""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_REFUSED, print_json
from console.cli.tty_confirm import confirm
from ops.actions.guard import Confirmation, Outcome, Plan
from ops.model import RigConfig
from ops.rig import open_rig

PlanFor = Callable[[Any, str], Awaitable[Plan]]
Act = Callable[..., Awaitable[Outcome]]   # (live, side, confirmation, plan=plan) -> Outcome


def unknown_side(rig: RigConfig, side: str) -> bool:
    """True (and said on stderr) when the rig has no such side."""
    if side in rig.sides:
        return False
    print(f"carla-console: unknown side {side!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
    return True


def exit_code(refused: str | None, ok: bool) -> int:
    if refused:
        return EXIT_REFUSED
    return EXIT_OK if ok else EXIT_FINDING


def run_guarded(rig: RigConfig, args, plan_for: PlanFor, act: Act, done: str | None) -> int:
    """done: the word for a full success, with one line per target; None prints the outcome's detail."""
    if unknown_side(rig, args.side):
        return EXIT_REFUSED

    async def go() -> Outcome:
        async with open_rig(rig) as live:
            plan = await plan_for(live, args.side)
            conf: Confirmation = confirm(plan, args.yes)
            return await act(live, args.side, conf, plan=plan)

    out = asyncio.run(go())
    if getattr(args, "json", False):
        print_json({**out.to_json(), "plan": out.plan.to_json()})
    elif out.refused:
        print(f"refused: {out.refused}")
    elif done is None:
        print(out.detail)
    else:
        for t in out.targets:
            print(f"  {t.target.role} {t.target.pid}: {t.outcome}{' ' + t.detail if t.detail else ''}")
        print(done if out.ok else "incomplete: see above")
    return exit_code(out.refused, out.ok)
