"""`launch SIDE [--dry-run] [--json] [--yes]`: start the side's detached harness (ops/actions/launch.py).

--dry-run shows exactly what a launch would do (argv, env, cwd, resume and why, the routes it runs and the
records it replaces, backup path) and refuses
with the same reason and exit code (3) as the launch itself would.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from console.cli.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, print_json
from console.cli.tty_confirm import confirm
from ops.actions.launch import LaunchPlan, execute_launch, needs_server, plan_launch, start_server
from ops.model import RigConfig
from ops.rig import open_rig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    if args.side not in rig.sides:
        print(f"carla-console launch: no side {args.side!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
        return EXIT_USAGE
    if rig.engine != "process" and not args.dry_run:
        return asyncio.run(_submit(rig, args))
    return asyncio.run(_run(rig, args))


async def _submit(rig: RigConfig, args: argparse.Namespace) -> int:
    """A scheduled side: "start a side" is its engine's (a batch job; the harness runs in it, on the node,
    and applies launch's checks there, before every attempt)."""
    from ops.actions.guard import Confirmation
    from ops.engines import engine_for
    if not args.yes:
        print(f"launch {args.side}: submits a {rig.engine} job; confirm with --yes", file=sys.stderr)
        return EXIT_REFUSED
    async with open_rig(rig) as live:
        [started] = await engine_for(rig, live.hosts).start(live, [args.side], Confirmation(True, "--yes"))
    if args.json:
        print_json({"side": started.side, "ok": started.ok, "detail": started.detail, "refused": started.refused,
                    "job": started.target.to_json() if started.target else None})
    else:
        print(f"{started.side}: {'submitted' if started.ok else 'REFUSED'}: {started.refused or started.detail}")
    return EXIT_OK if started.ok else EXIT_REFUSED


def _show(lp: LaunchPlan, as_json: bool, extra: dict | None = None) -> None:
    if as_json:
        print_json({**lp.to_json(), **(extra or {})})
        return
    print(f"side {lp.side}: {'REFUSED: ' + lp.refused if lp.refused else 'launch allowed'}")
    for c in lp.checks:
        print(f"  {c.name:11} {c.status:8} {c.detail}")
    print(f"  argv:   {' '.join(lp.argv)}")
    print(f"  cwd:    {lp.cwd}")
    print(f"  env:    {' '.join(f'{k}={v}' for k, v in lp.env.items()) or '-'}")
    print(f"  resume: {lp.resume} ({lp.decision.reason})")
    rp = lp.runplan
    print(f"  plan:   {rp.mode}: {rp.reason}")
    print(f"  runs:   {' '.join(rp.runs) or 'none'}")
    print(f"  overwrites: {' '.join(rp.overwrites) or 'none'}")
    print(f"  backup: {lp.backup or 'none (no checkpoint)'}")
    for k, v in (extra or {}).items():
        print(f"  {k}: {v}")


async def _run(rig: RigConfig, args: argparse.Namespace) -> int:
    async with open_rig(rig) as live:
        lp = await plan_launch(live, args.side)
        if not args.dry_run and not lp.allowed and needs_server(lp, rig.side(args.side)):
            # server.auto_start: bring the server up by adapter polling (its own plan and confirmation).
            from ops.actions.adapter import plan_adapter_poll
            poll_plan = await plan_adapter_poll(live, args.side)
            poll_conf = confirm(poll_plan, args.yes)
            if not poll_conf.proceed:
                _show(lp, args.json, {"launched": False, "refused_by": poll_conf.via})
                return EXIT_REFUSED
            ok, detail = await start_server(live, args.side, poll_conf)
            print(detail, file=sys.stderr)
            lp = await plan_launch(live, args.side)
        if args.dry_run or not lp.allowed:
            _show(lp, args.json)
            return EXIT_OK if lp.allowed else EXIT_REFUSED
        conf = confirm(lp.plan, args.yes)
        if not conf.proceed:
            _show(lp, args.json, {"launched": False, "refused_by": conf.via})
            return EXIT_REFUSED
        res = await execute_launch(live, lp, conf)
        _show(lp, args.json, {"launched": res.ok, "harness_pid": res.harness_pid, "backup_made": res.backup,
                              "harness_status": res.harness_status,
                              "detail": res.outcome.refused or res.outcome.detail})
        return EXIT_OK if res.ok else EXIT_REFUSED
