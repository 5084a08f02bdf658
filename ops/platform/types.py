"""The values the platform verbs answer with (apart from the verbs, so every host type can import them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ops.tristate import Evidence

SignalWord = Literal["sent", "gone", "changed", "error"]
SIGNAL_WORDS: tuple[SignalWord, ...] = ("sent", "gone", "changed", "error")


@dataclass(frozen=True)
class SignalOutcome:
    outcome: SignalWord
    detail: str = ""

    @classmethod
    def from_reply(cls, word: object, detail: str) -> SignalOutcome:
        """A host script's answer; a word outside the protocol is an error, never taken as sent/gone."""
        for w in SIGNAL_WORDS:
            if word == w:
                return cls(w, detail)
        return cls("error", f"unexpected outcome {word!r}: {detail}")


@dataclass(frozen=True)
class TcpCheck:
    open: bool | None     # None: could not tell (timeout: a silent host or a filtered port)
    evidence: Evidence


@dataclass(frozen=True)
class Listeners:
    host: str
    ports: dict[int, frozenset[int | None]] = field(default_factory=dict)  # port → owner pids (None: unseen)
    error: str | None = None
    took_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def owners(self, port: int) -> frozenset[int | None]:
        return self.ports.get(port, frozenset())

    def evidence(self) -> Evidence:
        return Evidence(what=f"listening tcp ports of {self.host}", ok=self.ok,
                        detail=f"{len(self.ports)} ports" if self.ok else "", error=self.error,
                        took_ms=self.took_ms)


@dataclass(frozen=True)
class FileStat:
    exists: bool
    mtime: float | None = None
    size: int | None = None
    host_now: float | None = None    # the host's clock when stat ran: ages are computed on one clock
    error: str | None = None
    took_ms: float = 0.0


@dataclass(frozen=True)
class FileText:
    text: str | None
    error: str | None = None
    missing: bool = False
