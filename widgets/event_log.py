"""The event log: what the console (and any other console or harness) did, from the audit trail.

Audit records arrive as dicts; this widget only formats them. Lines are appended, never re-rendered, so
an operator scrolling back sees exactly what was there.
"""
from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.widgets import RichLog

from widgets.words import WORD_STYLE


def audit_text(rec: dict[str, Any]) -> Text:
    if "unparseable" in rec:
        return Text(f"? unparseable audit line: {rec['unparseable'][:120]}", style="yellow")
    when = rec.get("time")
    stamp = time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "--:--:--"
    outcome = str(rec.get("outcome", ""))
    t = Text(f"{stamp} ", style="dim")
    t.append(f"{rec.get('side', '-')} {rec.get('operation', '?')} ")
    t.append(outcome, style=WORD_STYLE.get(outcome, "bold" if outcome == "done" else ""))
    detail = str(rec.get("detail", ""))
    if detail:
        t.append(f"  {detail[:200]}")
    return t


class EventLog(RichLog):
    def __init__(self, **kw) -> None:
        super().__init__(max_lines=500, wrap=False, markup=False, highlight=False, auto_scroll=True, **kw)

    def add_audit(self, rec: dict[str, Any]) -> None:
        self.write(audit_text(rec))

    def add_note(self, text: str, stamp: float | None = None) -> None:
        """A console-side event that is not an audit line (a scan result, a refusal before any plan)."""
        when = time.strftime("%H:%M:%S", time.localtime(stamp if stamp is not None else time.time()))
        self.write(Text(f"{when} ", style="dim") + Text(text))
