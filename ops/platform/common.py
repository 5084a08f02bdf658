"""Pieces every host implementation shares: limits, error texts, the detached-spawn interface."""
from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")

# A runaway tool (a log cat, a verbose probe) must not eat the console's memory: each stream keeps its
# first MAX_OUTPUT bytes, the rest is read and dropped so the child never blocks on a full pipe.
MAX_OUTPUT = 8 * 1024 * 1024
TRUNCATED_NOTE = "\n[carla-console: output truncated after {n} bytes]\n"

# TERM, then this long for the process group to go, then KILL.
KILL_GRACE_S = 1.0


class _Readable(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


async def read_capped(stream: _Readable | None, cap: int = MAX_OUTPUT) -> tuple[bytes, int]:
    """Read to EOF, keep the first `cap` bytes, count (and drop) the rest: (kept, dropped)."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    dropped = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept), dropped
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
        dropped += max(0, len(chunk) - max(room, 0))


def settled(fut: asyncio.Future[T]) -> asyncio.Future[T]:
    """fut, marked so that its outcome is always retrieved: a reader gather cancelled on quit (or on a
    timeout, behind a shield that let go of it) would otherwise log `_GatheringFuture exception was never
    retrieved` with a CancelledError on every exit. Whoever awaits fut still gets its exception."""
    def _retrieve(f: asyncio.Future) -> None:
        if not f.cancelled():
            f.exception()
    fut.add_done_callback(_retrieve)
    return fut


class SpawnError(RuntimeError):
    """A detached process could not be started; the message is the raw reason."""


def timeout_error(timeout: float) -> str:
    return f"timeout after {float(timeout)} s"


def decode(data: bytes, truncated_by: int = 0) -> str:
    text = data.decode("utf-8", errors="replace")
    if truncated_by:
        text += TRUNCATED_NOTE.format(n=len(data))
    return text


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate env names once for every host: a name with '=' or NUL would smuggle another variable."""
    out: dict[str, str] = {}
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"environment entries must be strings: {k!r}={v!r}")
        if not k or "=" in k or "\x00" in k or "\x00" in v:
            raise ValueError(f"invalid environment variable: {k!r}")
        out[k] = v
    return out


def check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, (str, bytes)):
        # A bare string would be iterated character by character; it is always a caller bug.
        raise TypeError("argv must be a sequence of strings, not a string")
    out = tuple(argv)
    if not out:
        raise ValueError("empty argv")
    for a in out:
        if not isinstance(a, str):
            raise TypeError(f"argv elements must be str, got {type(a).__name__}: {a!r}")
        if "\x00" in a:
            raise ValueError("argv element contains NUL")
    return out
