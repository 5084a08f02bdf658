"""Atomic file writes: readers (status, the TUI, another console) see the old file or the new, never half.

tmp file in the same folder → fsync → rename; the tmp file is removed if anything fails on the way.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_bytes(path, (json.dumps(data, indent=1, default=str) + "\n").encode())
