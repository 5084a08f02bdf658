"""Tri-state verdicts: what a probe measured, or that it could not measure.

UNKNOWN is a first-class answer. A probe that times out, lacks a package, cannot parse a tool's output
or loses its transport says UNKNOWN and keeps the raw error as evidence; it never guesses DEAD.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum


class StateWord(str, Enum):
    """A state word: compares and serialises as its text, prints as its text (StrEnum from 3.11 on)."""

    def __str__(self) -> str:
        return str(self.value)


class State(StateWord):
    ALIVE = "ALIVE"
    DEAD = "DEAD"
    UNKNOWN = "UNKNOWN"
    # A server whose process and port are present but whose RPC stayed silent in K consecutive probes over
    # at least T seconds: a measurement (positive evidence), unlike UNKNOWN (ops/probes/server.py).
    HUNG = "HUNG"


class Beat(StateWord):
    """The heartbeat of an evaluator: its log's mtime against stall_s."""

    FRESH = "FRESH"
    STALE = "STALE"
    UNKNOWN = "UNKNOWN"
    NOT_STARTED = "NOT_STARTED"


@dataclass(frozen=True)
class Evidence:
    """One measurement: what was asked, what came back, when and how long it took."""

    what: str
    ok: bool
    detail: str = ""
    error: str | None = None
    took_ms: float = 0.0
    at: float = field(default_factory=time.time)

    def line(self) -> str:
        text = f"{self.what}: {self.detail or ('ok' if self.ok else 'failed')}"
        if self.error:
            text += f" [{self.error}]"
        return f"{text} ({self.took_ms:.0f} ms)"

    def to_json(self) -> dict:
        return {"what": self.what, "ok": self.ok, "detail": self.detail, "error": self.error,
                "took_ms": round(self.took_ms, 1), "at": self.at}


@dataclass(frozen=True)
class Verdict:
    state: State
    evidence: tuple[Evidence, ...] = ()
    summary: str = ""

    @property
    def known(self) -> bool:
        return self.state is not State.UNKNOWN

    def to_json(self) -> dict:
        return {"state": self.state.value, "summary": self.summary,
                "evidence": [e.to_json() for e in self.evidence]}


def unknown(what: str, error: str, took_ms: float = 0.0, detail: str = "") -> Verdict:
    ev = Evidence(what=what, ok=False, detail=detail, error=error, took_ms=took_ms)
    return Verdict(State.UNKNOWN, (ev,), summary=f"{what}: {error}")
