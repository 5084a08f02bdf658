"""An await under a timeout, without the task asyncio.wait_for makes for it.

For the calls made every poll: wait_for wraps its awaitable in a new task, which costs two extra event-loop
wake-ups a call (on this project's VMs an epoll wake-up alone is ~60 µs). asyncio.timeout (3.11) cancels the
awaiting task itself; 3.10 keeps wait_for. Both raise asyncio.TimeoutError.
"""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(timeout: float, aw: Awaitable[T]) -> T:
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await aw
    return await asyncio.wait_for(aw, timeout)   # pragma: no cover - Python 3.10
