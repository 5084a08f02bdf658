"""`adapter SIDE [--yes] [--json]`: adapter polling (ops/actions/adapter.py) with the three-state confirmation.

Exit 0 an adapter found (recorded in state_dir/sides/SIDE/adapter.json), 1 none renders, 3 refused
(a verdict UNKNOWN — before or during the polling —, a precondition, or no confirmation).
"""
from __future__ import annotations

import asyncio
import sys

from console.cli.exits import EXIT_REFUSED, print_json
from console.cli.guarded import unknown_side
from console.cli.tty_confirm import confirm
from ops.actions.adapter import AdapterEvent, AdapterReport, plan_adapter_poll, poll_adapters
from ops.model import RigConfig
from ops.rig import open_rig


def _print_event(ev: AdapterEvent) -> None:
    who = "" if ev.adapter is None else f"adapter {ev.adapter}: "
    print(f"  {who}{ev.kind}: {ev.detail}", file=sys.stderr, flush=True)


def render(report: AdapterReport) -> list[str]:
    lines = [f"{'ADAPTER':7}  {'VERDICT':13}  {'BASELINE':>9}  {'AFTER':>9}  {'DELTA':>7}  GPU / DETAIL"]
    for t in report.tries:
        g = t.gpu if t.gpu is not None else (next(iter(t.baseline), None))
        base = t.baseline.get(g) if g is not None else None
        after = t.after.get(g) if (t.after and g is not None) else None
        fmt = lambda v: "?" if v is None else f"{v} MiB"  # noqa: E731
        lines.append(f"{t.adapter:<7}  {t.verdict:13}  {fmt(base):>9}  {fmt(after):>9}  "
                     f"{'?' if t.delta_mb is None else f'{t.delta_mb:+d}':>7}  "
                     f"{'gpu' + str(t.gpu) + ' ' + (t.gpu_name or '') + ' · ' if t.gpu is not None else ''}{t.detail}")
        if t.stopped:
            lines.append(f"{'':7}  stopped: {t.stopped}")
    acc = report.accepted
    if acc:
        lines.append(f"accepted: -graphicsadapter={acc.adapter} (gpu{acc.gpu} {acc.gpu_name}), server pid "
                     f"{acc.server_pid}; recorded in {report.record}")
    elif report.refused:
        lines.append(f"refused: {report.refused}")
    elif report.stopped_on:
        lines.append(f"stopped: {report.stopped_on}")
    else:
        lines.append("no candidate rendered")
    return lines


async def _run(rig: RigConfig, args) -> AdapterReport:
    async with open_rig(rig) as live:
        plan = await plan_adapter_poll(live, args.side)
        conf = confirm(plan, args.yes)
        return await poll_adapters(live, args.side, conf, on_event=None if args.json else _print_event,
                                   plan=plan)


def run(rig: RigConfig, args) -> int:
    if unknown_side(rig, args.side):
        return EXIT_REFUSED
    report = asyncio.run(_run(rig, args))
    if args.json:
        print_json(report.to_json())
    else:
        print("\n".join(render(report)))
    return report.exit_code
