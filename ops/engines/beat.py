"""One scheduler query per beat, shared by every side polled on it (tens of sides: one squeue, not tens).

The first side of a beat starts the observation; the others of that beat await the same task; an answer
younger than `share_s` is reused. A display's beat (within_s > 0) takes the last answer while it is
younger than within_s and the next one is read beside it, so the beat does not wait for squeue's round
trip to the controller (most of a 32-side SLURM beat's wall time); a first look, and every caller that
passes 0, waits for the answer. Plans never use this: they read the job exactly (scontrol) themselves.
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
        self._at: float | None = None   # monotonic time of the last answer
        self._last: dict[str, Any] = {}

    async def runs(self, live: Any, within_s: float = 0.0) -> dict[str, Any]:
        now = time.monotonic()
        age = None if self._at is None else now - self._at
        if self._task is None and age is not None and age < self.share_s:
            return self._last
        if self._task is None:
            task = self._task = asyncio.ensure_future(self._observe(live))
            task.add_done_callback(self._done)
        if within_s > 0 and age is not None and age < within_s:
            return self._last
        return await asyncio.shield(self._task)

    async def _observe(self, live: Any) -> dict[str, Any]:
        obs = await self.engine.observe(live)
        self._last = obs.runs if hasattr(obs, "runs") else obs
        self._at = time.monotonic()
        return self._last

    def _done(self, task: asyncio.Task) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.exception()   # retrieved even when no caller waited for it (a display's beat)
