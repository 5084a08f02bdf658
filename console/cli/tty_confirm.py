"""Three-state confirmation on the command line.

Every destructive command prints the exact plan (host, pid, start time, role, cmdline) and the verdicts,
then needs the side name typed on a TTY, or --yes. UNKNOWN refuses whatever was passed; so does a missing
TTY without --yes. The guard checks all of this again: this module only collects the operator's word.
"""
from __future__ import annotations

import sys
from typing import TextIO

from ops.actions.guard import Confirmation, Plan


def render_plan(plan: Plan) -> list[str]:
    lines = [f"{plan.op.value} on side {plan.side} (host {plan.host})"]
    if plan.action:
        lines.append(f"  action: {plan.action}")
    lines.append("  verdicts: " + " · ".join(f"{k} {v}" for k, v in plan.verdicts.items()))
    for e in plan.evidence:
        lines.append(f"    {e}")
    if plan.jobs:
        lines.append("  jobs:")
        lines.append(f"    {'CLUSTER':10}  {'JOB':>10}  {'SUBMITTED':19}  {'STATE':10}  NAME")
        for j in plan.jobs:
            lines.append(f"    {j.cluster:10}  {j.job_id:>10}  {j.submit_time:19}  {j.state:10}  {j.name}")
    if plan.targets:
        lines.append("  targets (outer → inner):")
        lines.append(f"    {'PID':>7}  {'STARTED':19}  {'ROLE':9}  CMDLINE")
        for t in plan.targets:
            cmd = " ".join(t.cmdline) if t.cmdline is not None else "<unreadable>"
            lines.append(f"    {t.pid:>7}  {t.start_text():19}  {t.role:9}  {cmd[:160]}")
    if plan.refused:
        lines.append(f"  REFUSED: {plan.refused}")
    return lines


def confirm(plan: Plan, yes: bool, stdin: TextIO | None = None, out: TextIO | None = None) -> Confirmation:
    stdin = stdin or sys.stdin
    out = out or sys.stderr
    for line in render_plan(plan):
        print(line, file=out)
    if plan.refused:
        return Confirmation(False, "refused")
    if yes:
        return Confirmation(True, "--yes", typed=plan.side)
    try:
        tty = stdin.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        print("refused: no TTY to confirm on and no --yes", file=out)
        return Confirmation(False, "no-tty")
    print(f"type the side name ({plan.side}) to proceed, anything else cancels: ", end="", file=out, flush=True)
    answer = stdin.readline().strip()
    ok = answer == plan.side
    if not ok:
        print("cancelled", file=out)
    return Confirmation(ok, "tty", typed=answer)
