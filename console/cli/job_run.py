"""`job-run SIDE|@SIDES_FILE` (internal): what a side's SLURM job runs on its node (ops/engines/slurm_job.py)."""
from __future__ import annotations

import argparse

from ops.model import RigConfig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    from ops.engines.slurm_job import main
    return main(rig, args.side)
