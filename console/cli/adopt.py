"""`adopt SIDE [--yes] [--json]`: a new supervisor for a running evaluator whose harness died.
Exit 0 adopted, 1 started but failed, 3 refused (no evaluator, a harness alive, UNKNOWN, no confirmation)."""
from __future__ import annotations

from console.cli.guarded import run_guarded
from ops.actions.adopt import adopt, plan_adopt
from ops.model import RigConfig


def run(rig: RigConfig, args) -> int:
    return run_guarded(rig, args, plan_adopt, adopt, None)
