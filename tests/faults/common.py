"""Small helpers the fault scenarios share on top of tests/support/evalops_sim.py (reused, not copied)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.evalops_sim import REPO, cli, wait_until


def status(rig_yaml: Path, *extra: str) -> dict:
    res = cli(rig_yaml, "status", "--json", *extra)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["sides"]


def inject(d: Path, side: str, fault: str) -> None:
    subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), side, fault],
                   cwd=REPO, check=True, capture_output=True, timeout=30)


def wait_stale(rig_yaml: Path, side: str, timeout: float = 15) -> dict:
    got = wait_until(lambda: (s := status(rig_yaml, "--no-rpc")[side])["heartbeat"]["state"] == "STALE" and s,
                     timeout, every=0.3)
    assert got, f"side {side} never went STALE"
    return got


def rewrite(rig_yaml: Path, edit, name: str = "edited.yaml") -> Path:
    """A copy of rig.yaml with `edit(data)` applied (the sim rig's own file stays as it is)."""
    data = yaml.safe_load(rig_yaml.read_text())
    edit(data)
    out = rig_yaml.with_name(name)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def dry_plan(rig_yaml: Path, side: str) -> dict:
    res = cli(rig_yaml, "recover", side, "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    plan = json.loads(res.stdout)
    assert plan["refused"] is None, plan["refused"]
    return plan


def killed_by_signal(rc: int) -> bool:
    return rc < 0 or rc in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
