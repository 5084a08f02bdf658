"""Pinned execution: every Python-needing command runs in the side's conda env, cwd and env explicit.

A bare `python3` once probed a server from the wrong env, failed `import carla`, and the failure was
read as "server dead": a probe must run where the matching carla wheel is.
"""
from __future__ import annotations

from collections.abc import Sequence

from ops.model import EvaluatorConfig, RigConfig


def conda_argv(rig: RigConfig, ev: EvaluatorConfig, inner: Sequence[str], cwd: str | None = None) -> list[str]:
    return [*rig.conda, "run", "-n", ev.conda_env, "--no-capture-output", "--cwd", cwd or ev.cwd, *inner]


def python_argv(rig: RigConfig, ev: EvaluatorConfig, script: str, args: Sequence[str],
                cwd: str | None = None) -> list[str]:
    return conda_argv(rig, ev, [ev.python, script, *args], cwd=cwd)
