"""`reclaim SIDE [--yes] [--json]`: stop an IDLE side's server through the guard (ops/actions/reclaim.py).

Exit 0 stopped, 1 executed but something survived, 3 refused (busy side, a client, UNKNOWN, no
confirmation).
"""
from __future__ import annotations

from console.cli.guarded import run_guarded
from ops.actions.reclaim import plan_reclaim, reclaim
from ops.model import RigConfig


def run(rig: RigConfig, args) -> int:
    return run_guarded(rig, args, plan_reclaim, reclaim, "reclaimed")
