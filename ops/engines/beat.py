"""One scheduler query per beat, shared by every side polled on it (tens of sides: one squeue, not tens).

The first side of a beat starts the observation; the others of that beat await the same task; an answer
younger than `share_s` is reused. Plans never use this: they read the job exactly (scontrol) themselves.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any


class SharedObservation:
    def __init__(self, engine: Any, share_s: float) -> None:
        self.engine = engine
        self.share_s = share_s
        self._task: asyncio.Task | None = None
        self._at = 0.0
        self._last: dict[str, Any] = {}

    async def runs(self, live: Any) -> dict[str, Any]:
        if self._task is None and time.monotonic() - self._at < self.share_s:
            return self._last
        if self._task is None:
            self._task = asyncio.ensure_future(self.engine.observe(live))
        task = self._task
        try:
            obs = await asyncio.shield(task)
        finally:
            if task.done() and self._task is task:
                self._task = None
        self._last = obs.runs if hasattr(obs, "runs") else obs
        self._at = time.monotonic()
        return self._last
