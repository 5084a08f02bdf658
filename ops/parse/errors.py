"""The one failure value every parser in ops/parse returns instead of raising.

A parser that cannot read a tool's output must not guess (an empty table, a zero, "no process"): it
returns a ParseError that carries the offending text, so the probe above answers UNKNOWN with the raw
evidence (see ops/tristate.py) and nothing destructive is authorised by a misread.
"""
from __future__ import annotations

from dataclasses import dataclass

EXCERPT_CHARS = 300


@dataclass(frozen=True)
class ParseError:
    what: str    # which format was being read: "netsh excludedportrange", "nvidia-smi query-gpu", ...
    reason: str  # why it was refused, in words
    text: str    # the offending excerpt, at most EXCERPT_CHARS characters

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}" + (f" [{self.text!r}]" if self.text else "")

    @classmethod
    def of(cls, what: str, reason: str, text: str = "", at: int | None = None) -> ParseError:
        """Build one with `text` cut down to an excerpt (around offset `at` when given)."""
        return cls(what=what, reason=reason, text=excerpt(text, at))


def excerpt(text: str, at: int | None = None, limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` characters of `text`, centred on `at` when it is known.

    Evidence must stay small: a 10 MB garbage input must not become a 10 MB audit line.
    """
    if len(text) <= limit:
        return text
    if at is None:
        return text[: limit - 1] + "…"
    width = limit - 2  # room for an ellipsis on each side
    start = max(0, min(at - width // 2, len(text) - width))
    cut = text[start:start + width]
    return ("…" if start > 0 else "") + cut + ("…" if start + width < len(text) else "")


def as_text(what: str, data: object, max_chars: int) -> str | ParseError:
    """Common input gate: accept str (or bytes, decoded as UTF-8), refuse anything else or anything huge.

    Bytes are decoded with replacement rather than refused: a stray invalid byte in a tool's output must
    not hide the rest of it, and the replacement character can never look like a digit or a separator.
    The size check comes first so that an oversized input costs nothing but len().
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) > max_chars:
            return ParseError.of(what, f"input too large: {len(data)} bytes > {max_chars}",
                                 bytes(data[:EXCERPT_CHARS]).decode("utf-8", "replace"))
        data = bytes(data).decode("utf-8", "replace")
    if not isinstance(data, str):
        return ParseError.of(what, f"expected text, got {type(data).__name__}", repr(data)[:EXCERPT_CHARS])
    if len(data) > max_chars:
        return ParseError.of(what, f"input too large: {len(data)} characters > {max_chars}", data[:EXCERPT_CHARS])
    # A UTF-8 BOM survives a plain .decode("utf-8") and PowerShell likes to write one.
    return data[1:] if data.startswith("\ufeff") else data
