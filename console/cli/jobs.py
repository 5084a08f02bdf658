"""`jobs [--json] [--keep [--watch S]]`: the rig's sides as its engine runs them (jobs of a SLURM rig,
harnesses of a local one); `--keep` applies the rig's requeue policy once (or every S seconds): a job lost
to a node failure, the time limit or a kill from outside is requeued through the guard within
`slurm.requeue_budget`."""
from __future__ import annotations

import argparse
import asyncio

from console.cli.exits import EXIT_OK, EXIT_REFUSED, print_json
from ops.actions.guard import Confirmation
from ops.engines import engine_for
from ops.model import RigConfig
from ops.rig import open_rig

POLICY = Confirmation(True, "requeue-policy")   # the rig's documented policy: requeue within the budget


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    return asyncio.run(_run(rig, args))


async def _run(rig: RigConfig, args: argparse.Namespace) -> int:
    async with open_rig(rig) as live:
        engine = engine_for(rig, live.hosts)
        refused = False
        while True:
            kept = []
            if args.keep and hasattr(engine, "keep"):
                for o in await engine.keep(live, POLICY):
                    kept.append({"side": o.plan.side, "ok": o.ok, "refused": o.refused, "detail": o.detail})
                    refused = refused or not o.ok
            obs = await engine.observe(live)
            runs = obs.runs if hasattr(obs, "runs") else obs
            if args.json:
                print_json({"engine": rig.engine, "sides": {s: r.to_json() for s, r in sorted(runs.items())},
                            "requeued": kept})
            else:
                for s in rig.sides:
                    r = runs.get(s)
                    print(f"{s:12} {'-' if r is None else r.word:12} {'' if r is None else r.state.value:8} "
                          f"{'' if r is None or r.job is None else r.job.job_id}")
                for k in kept:
                    print(f"requeue {k['side']}: {'ok' if k['ok'] else 'refused'}: {k['refused'] or k['detail']}")
            if not args.watch:
                return EXIT_REFUSED if refused else EXIT_OK
            await asyncio.sleep(args.watch)
