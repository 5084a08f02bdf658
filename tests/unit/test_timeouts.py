"""within(): an await under a timeout that runs in the caller's own task (no task per poll)."""
from __future__ import annotations

import asyncio
import sys

import pytest

from ops.platform.timeouts import within


def test_the_result_comes_back_and_the_work_ran_in_the_callers_task() -> None:
    async def work() -> asyncio.Task | None:
        await asyncio.sleep(0)
        return asyncio.current_task()

    async def main() -> None:
        ran_in = await within(5.0, work())
        if sys.version_info >= (3, 11):
            assert ran_in is asyncio.current_task()
    asyncio.run(main())


def test_a_timeout_raises_asyncio_timeouterror_and_cancels_the_work() -> None:
    cancelled = []

    async def hang() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await within(0.05, hang())
    asyncio.run(main())
    assert cancelled == [True]
