"""`carla-console -c RIG harness SIDE` (internal): the detached supervisor `launch` starts (ops/actions/harness.py)."""
from __future__ import annotations

import argparse

from ops.actions.harness import main
from ops.model import RigConfig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    return main(rig, args.side, adopt=getattr(args, "adopt", False))
