"""`sim up|down|inject --dir D`: the simulated rig of ops/sim (design.md §5)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from console.cli import EXIT_OK, EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    from ops.sim import rig as sim

    d = Path(args.dir).expanduser().resolve()
    try:
        if args.sim_command == "up":
            path = sim.up(d, start_evaluators=not args.no_evaluators)
            print(path)
        elif args.sim_command == "down":
            sim.down(d)
        elif args.sim_command == "inject":
            sim.inject(d, args.side, args.fault)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"carla-console sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
