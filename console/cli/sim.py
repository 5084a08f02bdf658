"""`sim up|down|inject --dir D`: the simulated rig of sim (design.md §5).

`up` starts the fake servers, then launches each side the way an operator would: through `launch`'s
plan and the guard, under a detached harness. So the demo and a later console see real harnesses,
attempt counts and audit lines.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from console.cli.exits import EXIT_OK, EXIT_USAGE


async def launch_sides(rig_yaml: Path) -> list[str]:
    """Launch every side's harness (a sim rig's servers are ALIVE, its checkpoints empty). Returns problems."""
    from ops.actions.guard import Confirmation
    from ops.actions.launch import execute_launch, plan_launch
    from ops.config import load_config
    from ops.rig import open_rig

    rig = load_config(rig_yaml)
    problems = []
    async with open_rig(rig) as live:
        for side in rig.sides:
            lp = await plan_launch(live, side)
            result = await execute_launch(live, lp, Confirmation(True, "sim", typed=side))
            if not result.outcome.ok:
                problems.append(f"{side}: {result.outcome.refused or result.outcome.detail}")
    return problems


def up_with_harnesses(d: Path) -> Path:
    from sim import rig as sim

    path = Path(sim.up(d, start_evaluators=False))
    problems = asyncio.run(launch_sides(path))
    if problems:
        sim.down(d)
        raise RuntimeError("the sim rig's sides did not launch: " + "; ".join(problems))
    return path


def run(args: argparse.Namespace) -> int:
    from sim import rig as sim

    d = Path(args.dir).expanduser().resolve()
    try:
        if args.sim_command == "up":
            if args.no_evaluators:
                print(sim.up(d, start_evaluators=False))
            else:
                print(up_with_harnesses(d))
        elif args.sim_command == "down":
            sim.down(d)
        elif args.sim_command == "inject":
            sim.inject(d, args.side, args.fault)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"carla-console sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
