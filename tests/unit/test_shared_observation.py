"""One squeue a beat, shared (ops/engines/beat.py): a display's beat takes the last answer while the next
one is read beside it; a first look, and any caller that passes within_s 0, waits for a new answer."""
from __future__ import annotations

import asyncio

from ops.engines.beat import SharedObservation
from tests.support.waits import until


class GatedEngine:
    """observe() answers only when the test lets it: the answer counts the queries made."""

    def __init__(self) -> None:
        self.asked = 0
        self.gate = asyncio.Event()

    async def observe(self, live: object) -> dict[str, int]:
        self.asked += 1
        n = self.asked
        await self.gate.wait()
        self.gate.clear()
        return {"A": n}


def test_a_display_beat_takes_the_last_answer_while_the_next_is_read() -> None:
    async def go() -> None:
        engine = GatedEngine()
        shared = SharedObservation(engine, share_s=0.0)   # every call after an answer starts a new query
        first = asyncio.ensure_future(shared.runs(None, within_s=60.0))
        await until(lambda: engine.asked == 1, 10.0, "the first query")
        assert not first.done()            # nothing answered yet: even a display's beat waits
        engine.gate.set()
        assert await first == {"A": 1}
        # The next beat: a new query starts, and the display takes the last answer at once.
        assert await shared.runs(None, within_s=60.0) == {"A": 1}
        await until(lambda: engine.asked == 2, 10.0, "the next query, beside the beat")
        # A plan's or a command's look (within_s 0) waits for the query under way, and gets its answer.
        waiting = asyncio.ensure_future(shared.runs(None))
        engine.gate.set()
        assert await waiting == {"A": 2}
        # An answer older than within_s is not taken: the beat waits for the new one.
        later = asyncio.ensure_future(shared.runs(None, within_s=1e-9))
        await until(lambda: engine.asked == 3, 10.0, "the third query")
        assert not later.done()
        engine.gate.set()
        assert await later == {"A": 3}
    asyncio.run(go())


def test_a_query_that_fails_fails_its_waiters_and_a_display_keeps_the_last_answer() -> None:
    class Failing(GatedEngine):
        async def observe(self, live: object) -> dict[str, int]:
            self.asked += 1
            if self.asked > 1:
                raise RuntimeError("squeue: slurm_load_jobs error: Unable to contact slurm controller")
            return {"A": 1}

    async def go() -> None:
        engine = Failing()
        shared = SharedObservation(engine, share_s=0.0)
        assert await shared.runs(None) == {"A": 1}
        assert await shared.runs(None, within_s=60.0) == {"A": 1}   # the new query fails beside it
        await until(lambda: shared._task is None, 10.0, "the failed query to end")
        try:
            await shared.runs(None)
        except RuntimeError as e:
            assert "Unable to contact" in str(e)
        else:
            raise AssertionError("a waiter of a failed query got no error")
    asyncio.run(go())
