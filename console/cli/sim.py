"""`sim up|down|inject --dir D`: the simulated rig of sim (design.md §5).

`up` starts the fake servers, then launches each side the way an operator would: through `launch`'s
plan and the guard, under a detached harness. So the demo and a later console see real harnesses,
attempt counts and audit lines.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_USAGE


async def launch_sides(rig_yaml: Path, notes: list[str] | None = None) -> list[str]:
    """Launch every side's harness (a sim rig's servers are ALIVE). Returns problems; `notes` gets one line
    per side that resumes a checkpoint an earlier `up` in the same directory left."""
    from ops.actions.guard import Confirmation
    from ops.actions.launch import execute_launch, plan_launch
    from ops.config import load_config
    from ops.rig import open_rig

    rig = load_config(rig_yaml)
    problems = []
    async with open_rig(rig) as live:
        for side in rig.sides:
            lp = await plan_launch(live, side)
            if notes is not None and lp.decision is not None and lp.decision.resume:
                notes.append(f"side {side} resumes: {lp.decision.reason}")
            result = await execute_launch(live, lp, Confirmation(True, "sim", typed=side))
            if not result.outcome.ok:
                problems.append(f"{side}: {result.outcome.refused or result.outcome.detail}")
    return problems


def up_with_harnesses(d: Path, route_s: float | None = None, notes: list[str] | None = None) -> Path:
    from sim import rig as sim

    path = Path(sim.up(d, start_evaluators=False, route_s=sim.ROUTE_S if route_s is None else route_s))
    problems = asyncio.run(launch_sides(path, notes))
    if problems:
        sim.down(d)
        raise RuntimeError("the sim rig's sides did not launch: " + "; ".join(problems))
    return path


FAULT_TAKEN_S = 5.0   # an evaluator reads its fault file within a tick (0.5 s in the sim)


def _taken(path: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not path.exists():
            return True
        time.sleep(0.1)
    return not path.exists()


def run(args: argparse.Namespace) -> int:
    from sim import rig as sim
    from sim.layout import SimLayout

    d = Path(args.dir).expanduser().resolve()
    try:
        if args.sim_command == "up":
            used = SimLayout.of(d).sides_json.exists()
            if args.no_evaluators:
                print(sim.up(d, start_evaluators=False))
            else:
                notes: list[str] = []
                print(up_with_harnesses(d, getattr(args, "route_s", None), notes))
                if used or notes:
                    print(f"{d} held an earlier sim rig: its checkpoints are kept, so its sides resume where "
                          f"they stopped (for a fresh run: sim down, then remove {d})", file=sys.stderr)
                for n in notes:
                    print(f"  {n}", file=sys.stderr)
        elif args.sim_command == "down":
            if not SimLayout.of(d).sides_json.exists():
                print(f"carla-console sim down: no sim rig in {d} (nothing was stopped)", file=sys.stderr)
                return EXIT_FINDING
            report = sim.down(d)
            print(f"sim down {d}: {len(report.terminated)} terminated, {len(report.killed)} killed"
                  + (f", {len(report.survivors)} STILL ALIVE" if report.survivors else ""))
        elif args.sim_command == "inject":
            inj = sim.inject(d, args.side, args.fault)
            print(f"sim inject {args.side} {args.fault}: {inj.detail}")
            if args.fault in sim.EVALUATOR_FAULTS:
                path = SimLayout.of(d).fault_file(args.side)
                if not _taken(path, FAULT_TAKEN_S):
                    path.unlink(missing_ok=True)   # a later evaluator must not take a fault meant for now
                    print(f"carla-console sim inject: no evaluator of side {args.side} took the fault within "
                          f"{FAULT_TAKEN_S:.0f} s (is it running?): no effect, the fault file is removed",
                          file=sys.stderr)
                    return EXIT_FINDING
                print(f"sim inject {args.side} {args.fault}: the evaluator took it")
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"carla-console sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
