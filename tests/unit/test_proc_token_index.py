"""ProcTable.with_tokens (the token index every side's chain and server lookups share) answers exactly what
filtering every process with has_token does, in the same order."""
from __future__ import annotations

import random

from ops.platform.procs import Proc, ProcTable

WORDS = ["python", "harness", "2000", "--port=2000", "-carla-rpc-port=2000", "x", "2002", "--port=2002", "sh"]


def test_with_tokens_is_the_filter_it_replaces() -> None:
    rng = random.Random(7)
    for _ in range(200):
        procs = {}
        for pid in rng.sample(range(1, 5000), rng.randint(0, 40)):
            cmd = None if rng.random() < 0.1 else tuple(rng.choice(WORDS) for _ in range(rng.randint(0, 5)))
            procs[pid] = Proc(pid, 1, rng.random() * 1e6, cmd)
        table = ProcTable("h", procs)
        for k in (1, 2, 3):
            want = rng.sample(WORDS, k)
            assert table.with_tokens(*want) == [p for p in procs.values() if any(p.has_token(t) for t in want)]
    assert ProcTable("h").with_tokens("x") == []
