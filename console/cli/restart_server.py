"""`restart-server SIDE [--yes] [--json]`: restart a HUNG or DEAD server (ops/actions/restart_server.py).

It measures first (forced RPC probes over `server.hung_after_s`), so it can take that long. Exit 0
restarted, 1 tried and failed, 3 refused (ALIVE, UNKNOWN, the evaluator running, no confirmation).
"""
from __future__ import annotations

import asyncio

from console.cli.exits import EXIT_REFUSED, print_json
from console.cli.guarded import exit_code, unknown_side
from console.cli.tty_confirm import confirm
from ops.actions.adapter import plan_adapter_poll
from ops.actions.guard import Confirmation
from ops.actions.restart_server import RestartResult, measure_server, plan_stop_hung, restart_server
from ops.model import RigConfig
from ops.rig import open_rig
from ops.tristate import State


async def _run(rig: RigConfig, args) -> RestartResult:
    async with open_rig(rig) as live:
        sc = rig.sides[args.side].server
        if not args.json:
            print(f"measuring the server of {args.side}: up to {sc.hung_probes} rpc probes over "
                  f"{sc.hung_after_s:.0f} s ...", flush=True)
        snap = await measure_server(live, args.side)
        if snap.server.verdict.state is State.HUNG:
            conf = confirm(plan_stop_hung(snap, sc.host), args.yes)
        elif snap.server.verdict.state is State.DEAD:
            conf = confirm(await plan_adapter_poll(live, args.side), args.yes)
        else:
            conf = Confirmation(False, "--yes" if args.yes else "none")
        return await restart_server(live, args.side, conf, snap=snap)


def run(rig: RigConfig, args) -> int:
    if unknown_side(rig, args.side):
        return EXIT_REFUSED
    res = asyncio.run(_run(rig, args))
    if getattr(args, "json", False):
        print_json(res.to_json())
    elif res.refused:
        print(f"refused: {res.refused}")
    else:
        print(f"server was {res.verdict}: {res.detail}")
    return exit_code(res.refused, res.ok)
