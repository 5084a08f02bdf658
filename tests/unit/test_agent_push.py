"""The agent's pushes (ops/scripts/agent.py Watch) and the console's use of them (remote_agent.py
pushed_stat / pushed_table), over the pipes of a real agent process:

- what a beat asks for is watched from then on, and a push answers it with no round trip;
- a push carries what changed: a file written, removed or swapped for a FIFO; a process started or gone;
- pushes that stop (the agent frozen) are not used once older than within_s: the caller asks instead;
- a pushed table this end lost track of is sent whole again; a pid not yet re-read by the agent is asked.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.waits import until
from tests.unit.test_remote_agent import agent_process

WITHIN_S = 0.5   # pushes every 0.3 s


@pytest.mark.parametrize("flags", [(), ("-S",)], ids=["msgpack", "builtin-codec"])
def test_a_watched_file_is_pushed_with_its_changes(tmp_path: Path, flags: tuple[str, ...]) -> None:
    log = tmp_path / "log.txt"
    log.write_text("one\n")

    async def go() -> None:
        async with agent_process(*flags) as (agent, _pid):
            assert agent.pushed_stat(str(log), WITHIN_S) is None   # not watched yet: the caller asks
            st = await until(lambda: agent.pushed_stat(str(log), WITHIN_S))
            assert st.exists and st.size == 4 and st.error is None
            assert st.mtime == pytest.approx(log.stat().st_mtime, abs=1e-6)
            assert st.host_now is not None and abs(st.host_now - time.time()) < 5
            log.write_text("one\ntwo\n")
            await until(lambda: (agent.pushed_stat(str(log), WITHIN_S) or st).size == 8)
            log.unlink()
            await until(lambda: not (agent.pushed_stat(str(log), WITHIN_S) or st).exists)
            os.mkfifo(log)   # never opened by a push: a stat tells it from a file
            special = await until(lambda: (agent.pushed_stat(str(log), WITHIN_S) or st).error)
            assert "not a regular file" in special
            n = agent.pushes
            await until(lambda: agent.pushes >= n + 3)   # pushes go on when nothing changes
    asyncio.run(go())


def test_a_pushed_table_follows_the_processes() -> None:
    async def go() -> None:
        async with agent_process() as (agent, pid):
            assert agent.pushed_table("h", WITHIN_S, frozenset()) is None
            first = await until(lambda: agent.pushed_table("h", WITHIN_S, frozenset()))
            assert first.ok and first.procs[pid].ppid == os.getpid()
            child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "push-test-token"],
                                     stdin=subprocess.PIPE)
            try:
                def has(want: bool) -> bool:
                    t = agent.pushed_table("h", WITHIN_S, frozenset())
                    p = t.procs.get(child.pid) if t is not None else None
                    return t is not None and (p is not None and p.has_token("push-test-token")) == want
                await until(lambda: has(True))
                # A pid to re-read that the agent's spec lacks: no pushed table until a push has re-read it.
                watched = frozenset({child.pid})
                assert agent.pushed_table("h", WITHIN_S, watched) is None
                await until(lambda: agent.pushed_table("h", WITHIN_S, watched))
            finally:
                child.stdin.close()   # type: ignore[union-attr]
                child.wait(10)
            await until(lambda: has(False))
            # This end lost track of the pushed change sets: the agent is asked for the whole table again.
            agent._pushed.seq = (agent._pushed.seq or 0) - 1
            n = agent.pushes
            await until(lambda: agent.pushes > n + 1 and agent.pushed_table("h", WITHIN_S, watched))
    asyncio.run(go())


def test_pushes_that_stop_are_not_used(tmp_path: Path) -> None:
    """A frozen agent (or a stat hung on a dead mount, which holds the pushing thread) pushes nothing: its
    last push ages past within_s and the caller asks with a request, bounded by its own deadline."""
    log = tmp_path / "log.txt"
    log.write_text("x")

    async def go() -> None:
        async with agent_process() as (agent, pid):
            await until(lambda: agent.pushed_stat(str(log), WITHIN_S))
            os.kill(pid, signal.SIGSTOP)
            try:
                await until(lambda: agent.pushed_stat(str(log), WITHIN_S) is None, timeout=10)
                asked = await agent.stat_file(str(log), 0.3)
                assert "timeout after 0.3 s" in (asked.error or ""), asked
            finally:
                os.kill(pid, signal.SIGCONT)
            await until(lambda: agent.pushed_stat(str(log), WITHIN_S))
    asyncio.run(go())


def test_a_refused_watch_leaves_requests() -> None:
    """An agent that refuses the watch (an older agent: unknown op) is asked with requests, and the
    refusal is kept as the reason."""
    async def go() -> None:
        async with agent_process() as (agent, _pid):
            agent._want_period = float("nan")   # a spec the agent refuses: the period is checked there
            agent._send_spec()
            err = await until(lambda: agent.watch_error)
            assert "period" in err[1]
            assert agent.pushed_stat("/", WITHIN_S) is None
    asyncio.run(go())


def test_what_no_beat_asks_for_is_no_longer_watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ops.platform import remote_agent
    from ops.platform.remote_agent import WatchSpec
    monkeypatch.setattr(remote_agent, "WATCH_EXPIRE_S", 1.0)
    log = tmp_path / "log.txt"
    log.write_text("x")

    async def go() -> None:
        async with agent_process() as (agent, _pid):
            await until(lambda: agent.pushed_stat(str(log), WITHIN_S) and agent.pushed_table("h", WITHIN_S, frozenset()))
            # Nobody asks any more: the spec the agent holds becomes empty (and its pushes stop).
            await until(lambda: agent._spec == WatchSpec(round(WITHIN_S * remote_agent.PUSH_SHARE, 3), frozenset(),
                                                          False, frozenset()))
            assert agent.pushed_stat(str(log), WITHIN_S) is None   # asked again: watched again
            await until(lambda: agent.pushed_stat(str(log), WITHIN_S))
    asyncio.run(go())


def test_an_unchanged_pushed_table_keeps_its_token_index() -> None:
    """A push that changed no process hands out the same processes with the indexes earlier beats built
    (each token asked is a pass over the host's table), measured at the new push's time."""
    async def go() -> None:
        async with agent_process() as (agent, _pid):
            await until(lambda: agent.pushed_table("h", WITHIN_S, frozenset()))
            deadline = time.monotonic() + 60   # other processes of this machine may move: until a quiet push
            while True:
                moves, first = agent._pushed_moves, agent.pushed_table("h", WITHIN_S, frozenset())
                assert first is not None
                first.with_tokens("no-such-token")
                n = agent.pushes
                await until(lambda: agent.pushes > n)
                second = agent.pushed_table("h", WITHIN_S, frozenset())
                if agent._pushed_moves == moves:
                    break
                assert time.monotonic() < deadline, "no quiet push"
            assert second is not None and second is not first and second.procs is first.procs
            assert second._by_token is first._by_token and second.at > first.at
    asyncio.run(go())


def test_a_process_whose_state_moved_keeps_its_argv_tokens() -> None:
    """A watched process is re-read every push and its state letter moves (R, S): the change set carries
    it again, and its argv tokens (what every side's marker lookup tests) are not built again."""
    from ops.platform.remote_agent import TableMirror
    m = TableMirror()
    cmd = ["/opt/carla/CarlaUE4.sh", "-carla-rpc-port=2000"]
    m.apply({"base": None, "seq": 1, "count": 1, "gone": [], "rows": [[10, 1, "S", 1000.0, "CarlaUE4.sh", cmd]]})
    tokens = m.procs[10].tokens
    m.apply({"base": 1, "seq": 2, "count": 1, "gone": [], "rows": [[10, 1, "R", 1000.0, "CarlaUE4.sh", cmd]]})
    assert m.procs[10].state == "R" and m.procs[10].tokens is tokens
    m.apply({"base": 2, "seq": 3, "count": 1, "gone": [],
             "rows": [[10, 1, "R", 1000.0, "CarlaUE4.sh", [*cmd, "-quality-level=Low"]]]})
    assert m.procs[10].tokens is not tokens and "-quality-level=Low" in m.procs[10].tokens
