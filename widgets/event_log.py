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
    t.append(f"{rec.get('side', '-')} {operation_label(rec)} ")
    t.append(outcome, style=WORD_STYLE.get(outcome, "bold" if outcome == "done" else ""))
    detail = str(rec.get("detail", ""))
    if detail:
        t.append(f"  {detail}")
    return t


def operation_label(rec: dict[str, Any]) -> str:
    """The audit's operation in the words of the story. A launch writes two `relaunch` records, the
    console's (it started the harness) and the harness's (it started attempt k): they read as two different
    things because they are."""
    op = str(rec.get("operation", "?"))
    via = (rec.get("confirmation") or {}).get("via") if isinstance(rec.get("confirmation"), dict) else None
    if op == "relaunch":
        return "harness: attempt start" if via == "harness" else "launch"
    if via == "harness":
        return f"harness: {op}"
    return op


class EventLog(RichLog):
    """Long lines wrap: every line is read whole, whatever the terminal's width."""

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=500, wrap=True, markup=False, highlight=False, auto_scroll=True, min_width=20,
                         **kw)

    def on_mount(self) -> None:
        # Stay on the newest line when the panes above grow (a log tail that filled in) and the log gets
        # shorter, until the operator scrolls back to read.
        self.anchor()

    def add(self, text: Text) -> None:
        """One line, wrapped to the log's own width (a line is never cut)."""
        width = self.scrollable_content_region.width
        self.write(text, width=width if width > 0 else None)

    def add_change(self, side: str, word: str, text: str, stamp: float) -> None:
        """A state change seen between two polls: `text` with its state `word` in colour."""
        when = time.strftime("%H:%M:%S", time.localtime(stamp))
        t = Text(f"{when} ", style="dim")
        t.append(f"{side} ")
        body = Text(text)
        at = text.find(word) if word else -1
        if at >= 0:
            body.stylize(WORD_STYLE.get(word, "bold"), at, at + len(word))
        self.add(t + body)

    def add_audit(self, rec: dict[str, Any]) -> None:
        self.add(audit_text(rec))

    def add_note(self, text: str, stamp: float | None = None) -> None:
        """A console-side event that is not an audit line (a scan result, a refusal before any plan)."""
        when = time.strftime("%H:%M:%S", time.localtime(stamp if stamp is not None else time.time()))
        self.add(Text(f"{when} ", style="dim") + Text(text))
