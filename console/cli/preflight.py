"""`preflight [SIDE] [--json]`: will each side's evaluator start, in its env, against its server? (issue 21)

Per side, in its pinned env, from ops/scripts/preflight.py: carla imports and matches the server's
major.minor, one carla distribution, the evaluator's modules and the agent import from the side's own
tree, torch sees CUDA and not the server's GPU, no --debug for a scored run; plus the side's VRAM budget
and disk floor (the same gate every launch passes). Exit 0 when nothing refuses, 1 when a side would be
refused (a finding), 2 for an unknown side.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_USAGE, print_json
from ops.actions.gate import Gate, launch_gate
from ops.model import RigConfig
from ops.rig import open_rig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    names = [args.side] if args.side else list(rig.sides)
    unknown = [n for n in names if n not in rig.sides]
    if unknown:
        print(f"carla-console preflight: no side {unknown[0]!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_run(rig, names, args.json))


async def _gate(live, side: str) -> Gate:
    snap = await live.prober.side(side, rpc=False)
    return await launch_gate(live, side, snap)


async def _run(rig: RigConfig, names: list[str], as_json: bool) -> int:
    async with open_rig(rig) as live:
        gates = dict(zip(names, await asyncio.gather(*(_gate(live, n) for n in names))))
    refused = {n: [c for c in g.checks if c.status != "ok"] for n, g in gates.items()}
    if as_json:
        print_json({"rig": rig.name, "sides": {n: {**(g.preflight.to_json() if g.preflight else {}),
                                                     "gate": [c.__dict__ for c in g.checks],
                                                     "refused": "; ".join(c.detail for c in refused[n]) or None}
                                                 for n, g in gates.items()},
                    "resources": next((g.resources.to_json() for g in gates.values() if g.resources), None)})
    else:
        for n, g in gates.items():
            for line in g.lines():
                print(line)
            for ev_line in (e for c in (g.preflight.checks if g.preflight else ()) if c.blocks for e in c.evidence):
                print(f"      {ev_line}")
            for c in g.checks[1:] if g.preflight else g.checks:
                print(f"  {c.status.upper():8} {c.name:18} {c.detail}")
            print(f"  => {'REFUSED' if refused[n] else 'ready'}")
    return EXIT_FINDING if any(refused.values()) else EXIT_OK
