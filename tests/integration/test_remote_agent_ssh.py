"""The agent of an ssh host (ops/scripts/agent.py) through a real OpenSSH sshd on 127.0.0.1: a poll's
process table, stats, reads and tails go over its one channel instead of a remote exec each, with the
answers the commands give; it ends with the connection; a killed or stopped agent is replaced and every
request stays bounded; a host where it cannot start answers with the commands, as before."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from ops.platform.base import Result
from ops.platform.ssh import SshHost
from tests.support.waits import until

pytestmark = pytest.mark.ssh


class Counted(SshHost):
    """An SshHost that counts its remote execs (each one an ssh channel, a shell and a program)."""

    execs = 0

    async def run_command(self, command: str, timeout: float, argv: tuple[str, ...] | None = None) -> Result:
        self.execs += 1
        return await super().run_command(command, timeout, argv)


def pid_gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def files(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "eval.log"
    log.write_text("".join(f"tick {i}\n" for i in range(50)))
    ckpt = tmp_path / "checkpoint.json"
    ckpt.write_text('{"_checkpoint": {"progress": [3, 10], "records": []}}')
    return log, ckpt


async def answers(h: SshHost, log: Path, ckpt: Path) -> tuple:
    p = h.platform
    table = await p.process_table(10)
    st = await p.stat_file(str(log), 10)
    missing = await p.stat_file(str(log) + ".nope", 10)
    text = await p.read_text(str(ckpt), 10, 1 << 20)
    over = await p.read_text(str(ckpt), 10, 10)
    tail = await p.tail_lines(str(log), 3, 10, 4096)
    assert table.ok, table.error
    me = table.procs[os.getpid()]
    return ((me.ppid, me.cmdline, round(me.create_time, 1)), (st.exists, st.mtime, st.size, st.error),
            (missing.exists, missing.error), (text.text, text.error, text.missing), over.error, tail)


def test_a_poll_goes_over_the_agent_with_the_commands_answers(ssh_cfg, tmp_path: Path) -> None:
    log, ckpt = files(tmp_path)

    async def go():
        h = Counted(ssh_cfg)
        plain = Counted(ssh_cfg)
        plain.agent = lambda timeout: _none()   # type: ignore[method-assign]   # the commands, as before
        try:
            # Started first, with room: a start slower than half a probe's timeout (a loaded machine) would
            # rightly answer that probe with the commands.
            assert await h.agent(60) is not None, h.agent_error
            via_agent = [await answers(h, log, ckpt) for _ in range(3)]
            via_commands = await answers(plain, log, ckpt)
            return via_agent, via_commands, h.execs, h.agent_starts, plain.execs
        finally:
            await h.close()
            await plain.close()

    via_agent, via_commands, execs, starts, plain_execs = asyncio.run(go())
    assert via_agent[0] == via_agent[2] == via_commands
    assert via_commands[4] is not None and "larger than 10 bytes" in via_commands[4]
    assert via_commands[5] == ["tick 47", "tick 48", "tick 49"]
    assert (execs, starts) == (0, 1), "every request of three polls over one agent, no remote exec"
    assert plain_execs == 6


async def _none() -> None:
    return None


def test_the_agent_ends_with_its_connection(ssh_cfg) -> None:
    async def go() -> int:
        h = SshHost(ssh_cfg)
        try:
            assert (await h.platform.stat_file("/", 10)).exists
            agent = await h.agent(60)
            assert agent is not None and agent.pid is not None
            return agent.pid
        finally:
            await h.close()

    pid = asyncio.run(go())
    assert pid_gone(pid), f"agent {pid} outlived its connection"


def test_a_killed_agent_is_started_again(ssh_cfg, tmp_path: Path) -> None:
    log, _ = files(tmp_path)

    async def go():
        h = SshHost(ssh_cfg)
        try:
            first = await h.agent(60)
            assert first is not None and first.pid is not None
            os.kill(first.pid, signal.SIGKILL)
            errors = []
            deadline = time.monotonic() + 60   # a condition with a backstop, not a count of tries
            while True:
                st = await h.platform.stat_file(str(log), 5)
                if (st.error is None and h.agent_starts == 2) or time.monotonic() > deadline:
                    break
                errors.append(st.error)
                await asyncio.sleep(0.05)
            again = await h.agent(60)
            return first.pid, again, st, errors
        finally:
            await h.close()

    pid, again, st, errors = asyncio.run(go())
    assert st.exists and st.error is None and again is not None and again.pid != pid
    # A request caught by the death says so (never a missing file): UNKNOWN with the reason.
    assert all("agent on sshd" in e for e in errors if e), errors


def test_a_stopped_agent_is_replaced_and_no_request_waits_past_its_timeout(ssh_cfg, tmp_path: Path) -> None:
    log, _ = files(tmp_path)
    stopped: list[int] = []

    async def go():
        h = SshHost(ssh_cfg)
        try:
            first = await h.agent(60)
            assert first is not None and first.pid is not None
            os.kill(first.pid, signal.SIGSTOP)       # every call in it hangs, as on a dead hard mount
            stopped.append(first.pid)
            late = []
            for _ in range(first.max_stuck):
                t0 = time.monotonic()
                st = await h.platform.stat_file(str(log), 0.5)
                late.append((st.error, time.monotonic() - t0))
            assert not first.usable
            table = await h.platform.process_table(10)
            return late, table, h.agent_starts
        finally:
            await h.close()

    try:
        late, table, starts = asyncio.run(go())
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)   # its channel is closed: it reads EOF and ends
    assert all(err is not None and "timeout after 0.5 s" in err for err, _ in late), late
    assert all(took < 5 for _, took in late), late
    assert table.ok and starts == 2
    assert stopped[0] not in table.procs or table.procs[stopped[0]].state in ("T", "t")
    assert pid_gone(stopped[0])


def test_a_host_whose_agent_cannot_start_answers_with_the_commands(ssh_cfg, tmp_path: Path) -> None:
    log, _ = files(tmp_path)

    async def go():
        h = Counted(ssh_cfg)
        real = h.script_path

        async def script_path(name: str, timeout: float = 15.0) -> str:
            if name == "agent.py":
                return str(tmp_path / "no-such-agent.py")
            return await real(name, timeout)
        h.script_path = script_path   # type: ignore[method-assign]
        try:
            st = await h.platform.stat_file(str(log), 10)
            table = await h.platform.process_table(10)
            return st, table, h.agent_error, h.agent_starts, h.execs
        finally:
            await h.close()

    st, table, why, starts, execs = asyncio.run(go())
    assert st.exists and st.error is None and table.ok and os.getpid() in table.procs
    assert starts == 0 and execs >= 2
    assert why is not None and "no-such-agent.py" in why, why


def test_a_display_beat_reads_what_the_agent_pushed(ssh_cfg, tmp_path: Path) -> None:
    """A beat's stat and table (within_s > 0) ask once, are watched from then on, and later beats take the
    agent's pushes: no request goes out, and what they read follows the files and processes."""
    log, _ = files(tmp_path)
    mtime = log.stat().st_mtime

    async def go():
        h = SshHost(ssh_cfg)
        try:
            agent = await h.agent(60)
            assert agent is not None, h.agent_error
            p = h.platform
            assert (await p.stat_file(str(log), 10, within_s=1.0)).exists      # asked, then watched
            assert (await p.process_table(10, within_s=1.0)).ok

            async def next_push() -> None:
                n = agent.pushes
                await until(lambda: agent.pushes > n, 30.0, "a push")
            await next_push()
            await next_push()
            asked = dict(agent.asked)
            beats = []
            for _ in range(3):
                await next_push()
                beats.append((await p.stat_file(str(log), 10, within_s=1.0), await p.process_table(10, within_s=1.0)))
            no_requests = dict(agent.asked) == asked
            with open(log, "a") as f:
                f.write("tick 50\n")
            size = log.stat().st_size
            deadline = time.monotonic() + 30
            while (st := await p.stat_file(str(log), 10, within_s=1.0)).size != size and time.monotonic() < deadline:
                await next_push()
            forced = await p.stat_file(str(log), 10)   # within 0 (a plan): a request, always
            return beats, no_requests, st, size, forced, agent.asked["stat"] - asked.get("stat", 0)
        finally:
            await h.close()

    beats, no_requests, st, size, forced, stats_asked = asyncio.run(go())
    assert no_requests, "a beat's reads went out as requests while pushes came"
    for st0, table in beats:
        assert st0.exists and st0.error is None and st0.mtime == pytest.approx(mtime, abs=1e-6)
        assert table.ok and os.getpid() in table.procs
    assert st.size == size and st.error is None
    assert forced.size == size and stats_asked == 1
