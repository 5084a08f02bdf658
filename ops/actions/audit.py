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


class Audit:
    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.path = Path(state_dir) / "audit.jsonl"

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        line = {"time": time.time(), "iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "operator": operator(),
                "pid": os.getpid(), **record}
        data = (json.dumps(line, default=str, ensure_ascii=False) + "\n").encode()
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
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for ln in lines[-last:] if last else lines:
            try:
                out.append(json.loads(ln))
            except ValueError:
                out.append({"unparseable": ln[:300]})
        return out
