"""Engines: where a side's processes run (ops/engines/base.py says what an engine is).

Adding an engine is one module here with one class, and one line in ENGINES.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

# kind → "module:Class", imported on first use (an engine's module may need what another does not).
ENGINES: dict[str, str] = {
    "process": "ops.engines.process:ProcessEngine",
    "slurm": "ops.engines.slurm:SlurmEngine",
}


def engine_for(rig: Any, hosts: Mapping[str, Any]) -> Any:
    """The rig's engine (its `engine:` key), bound to its hosts."""
    module, _, cls = ENGINES[rig.engine].partition(":")
    return getattr(importlib.import_module(module), cls)(rig, hosts)
