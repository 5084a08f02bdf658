"""`stop SIDE [--yes] [--json]`: stop a side's run (harness, wrapper, evaluator) through the guard.

Exit 0 stopped, 1 executed but something survived, 3 refused (nothing running, UNKNOWN, no confirmation).
"""
from __future__ import annotations

from console.cli.guarded import run_guarded
from ops.actions.stop import plan_stop, stop
from ops.model import RigConfig


def run(rig: RigConfig, args) -> int:
    return run_guarded(rig, args, plan_stop, stop, "stopped")
