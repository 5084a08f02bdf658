"""Which audit records become event-log lines: one timed line per operation.

The audit trail is written for crash safety and post-mortems, so one operation may leave several records:
a kill plan writes `started` before its first signal and `done`/`incomplete` after the last; adapter
polling writes `adapter-launch` and `adapter-try` for each candidate before its one `adapter-poll` result
(whose detail names the accepted adapter and the tries before it). The event log tells the night's story:
a record that opens an operation is held back, and the record that ends it is the operation's one line.

An operation that never ended (its writer died mid-plan) is not hidden: a console started later shows its
opening record as it stands, and a running console shows it once it has been open for OPEN_MAX_S. No
Textual here: the app feeds records in, tests feed the records a real operation wrote.
"""
from __future__ import annotations

from typing import Any

# Records that are steps of another operation, by the operation that ends them.
STEP_OF: dict[str, str] = {"adapter-launch": "adapter-poll", "adapter-try": "adapter-poll"}
# Longer than any plan runs (4 candidates × a long start wait, a kill plan's grace and waits).
OPEN_MAX_S = 900.0

Key = tuple[Any, Any, Any]


def _opens(rec: dict[str, Any]) -> Key | None:
    """The operation this record opens or continues (writer pid, side, operation), or None when it ends
    one or stands alone."""
    op = rec.get("operation")
    if rec.get("outcome") == "started":
        return (rec.get("pid"), rec.get("side"), op)
    if op in STEP_OF:
        return (rec.get("pid"), rec.get("side"), STEP_OF[str(op)])
    return None


def _time(rec: dict[str, Any]) -> float | None:
    t = rec.get("time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


class AuditFold:
    """Feed it audit records in file order; it returns the ones the event log shows."""

    def __init__(self) -> None:
        self._open: dict[Key, dict[str, Any]] = {}   # operation → its first record (when it began)

    @property
    def pending(self) -> bool:
        """Operations are open: their records are held back (a later call may show them)."""
        return bool(self._open)

    def reset(self) -> None:
        """The audit file was rotated or replaced: what was open there is not known any more."""
        self._open.clear()

    def lines(self, records: list[dict[str, Any]], now: float, *, backlog: bool = False) -> list[dict[str, Any]]:
        """`backlog`: records written before this console started; an operation still open at their end
        is shown at once (its writer is gone or still busy: either way the operator should see it)."""
        shown: list[tuple[float, dict[str, Any]]] = []   # (when, record): a record without a time keeps its place
        when = 0.0
        for rec in records:
            if not isinstance(rec, dict) or "unparseable" in rec:
                shown.append((when, rec))
                continue
            when = _time(rec) or when
            key = _opens(rec)
            if key is not None:
                self._open.setdefault(key, rec)
                continue
            self._open.pop((rec.get("pid"), rec.get("side"), rec.get("operation")), None)
            shown.append((when, rec))
        late = [k for k, r in self._open.items()
                if backlog or (t := _time(r)) is None or now - t >= OPEN_MAX_S]
        for k in late:
            rec = self._open.pop(k)
            shown.append((_time(rec) or when, rec))
        if late:
            shown.sort(key=lambda tr: tr[0])   # an unfinished plan sits where it began (the sort is stable)
        return [rec for _, rec in shown]
