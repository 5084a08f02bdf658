"""The TUI's audit feed: this machine's audit.jsonl, plus the lines the supervisors of remote evaluator hosts
write into theirs (their recoveries, attempts, refusals), read through each host.

One append-only list in arrival order, which is what the event log consumes (it shows what it has not shown
yet, by count). A remote host whose state dir is this machine's (a shared home or NFS) has the very same
lines: a remote line already in the local file is not added twice (compared as whole records).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

REMOTE_TAIL_LINES = 200
REMOTE_TAIL_BYTES = 256 * 1024
REMOTE_EVERY_S = 2.0      # per host: a tail over ssh is cheap, but not every beat of every side


def _key(rec: dict[str, Any]) -> str:
    return json.dumps(rec, sort_keys=True, default=str)


class AuditFeed:
    def __init__(self, read_local: Callable[[], list[dict[str, Any]]]) -> None:
        self._read_local = read_local
        self._local_n = 0
        self._local_keys: set[str] = set()
        self._remote_keys: set[str] = set()
        # Remote lines already taken, as read: a host's tail is read every few seconds and is mostly the
        # same 200 lines, which need no parse and no key again (a tens-of-hosts rig's idle CPU).
        self._remote_raw: set[str] = set()
        self._pending: list[dict[str, Any]] = []     # remote lines not yet in the feed
        self._records: list[dict[str, Any]] = []
        self._asked: dict[str, float] = {}
        self.changed = True

    def local_changed(self) -> None:
        """The local file moved: take its new lines (a shorter file: rotated or replaced, start over)."""
        local = self._read_local()
        if len(local) < self._local_n:
            self._local_n, self._local_keys, self._records = 0, set(), []
            self._remote_keys, self._remote_raw = set(), set()
        for rec in local[self._local_n:]:
            self._local_keys.add(_key(rec))
            self._records.append(rec)
        self._local_n = len(local)
        self.changed = True

    def due(self, host: str, now: float | None = None) -> bool:
        """Whether host's audit tail should be read now (and, if so, the clock for it starts again)."""
        now = time.monotonic() if now is None else now
        if now - self._asked.get(host, -1e9) < REMOTE_EVERY_S:
            return False
        self._asked[host] = now
        return True

    def remote_lines(self, lines: list[str] | None) -> None:
        """The tail of a remote host's audit.jsonl (None: unreadable now; the next look tries again)."""
        for ln in lines or ():
            if ln in self._remote_raw:
                continue
            try:
                rec = json.loads(ln)
            except ValueError:
                continue   # a line cut by the tail's byte cap, or being written
            if not isinstance(rec, dict):
                continue
            self._remote_raw.add(ln)   # a whole record (a cut or half-written line is read again later)
            k = _key(rec)
            if k in self._remote_keys:
                continue
            self._remote_keys.add(k)
            self._pending.append(rec)

    def records(self) -> list[dict[str, Any]] | None:
        """The whole feed when it has grown since the last call, else None."""
        if self._pending:
            new = [r for r in self._pending if _key(r) not in self._local_keys]
            self._pending = []
            if new:
                self._records.extend(new)
                self.changed = True
        if not self.changed:
            return None
        self.changed = False
        return list(self._records)
