"""Async condition waits for tests: a condition with a backstop, never a fixed sleep."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL_S = 0.02   # how often the condition is looked at: the wait ends as soon as it holds


async def until(pred: Callable[[], object], timeout: float = 30.0, what: str = "the condition") -> object:
    """pred()'s first truthy value; AssertionError at the backstop (a condition, not a count of tries)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(POLL_S)
