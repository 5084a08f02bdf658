"""The append-only audit trail (state_dir/audit.jsonl): one JSON line per destructive step or refusal.

Lines are written with O_APPEND in one write() and fsync'd, so concurrent consoles and harnesses never
interleave half lines, and a crash right after an action still leaves its line on disk.
"""
from __future__ import annotations

import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ops.platform.bounded import read_tail
from ops.platform.procs import printable


def operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    tty = "notty"
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                tty = os.ttyname(stream.fileno())
                break
        except (OSError, ValueError, AttributeError):
            continue
    return f"{user}@{tty}"


MAX_READ_BYTES = 4 << 20


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable(v) for v in value]
    return value


class Audit:
    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.path = Path(state_dir) / "audit.jsonl"

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        line = {"time": time.time(), "iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "operator": operator(),
                "pid": os.getpid(), **record}
        # A chain member's argv may hold bytes that are not UTF-8: the line must still be written, or that
        # side could never be recovered (the guard refuses what it cannot audit).
        data = (json.dumps(_printable(line), default=str, ensure_ascii=False) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return line

    def read(self, last: int | None = None) -> list[dict[str, Any]]:
        try:
            # The newest lines only, capped: an audit grows for the life of a rig.
            raw = read_tail(self.path, MAX_READ_BYTES)
        except FileNotFoundError:
            return []
        lines = raw.decode("utf-8", errors="replace").splitlines()
        if len(raw) == MAX_READ_BYTES and lines:
            lines = lines[1:]   # cut mid-line by the cap
        out = []
        for ln in lines[-last:] if last else lines:
            try:
                out.append(json.loads(ln))
            except ValueError:
                out.append({"unparseable": ln[:300]})
        return out
