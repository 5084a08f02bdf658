"""Where a side's last accepted adapter is kept (written by adapter polling, read by every probe)."""
from __future__ import annotations

import json
from pathlib import Path

from ops.model import RigConfig
from ops.platform.bounded import read_regular


def record_path(rig: RigConfig, side: str) -> Path:
    return Path(rig.state_dir) / "sides" / side / "adapter.json"


def read_record(rig: RigConfig, side: str) -> dict | None:
    """The last accepted adapter of a side (for status), or None when there is none or it is unreadable."""
    try:
        data = json.loads(read_regular(record_path(rig, side), 1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
