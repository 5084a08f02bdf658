"""The remote agent (ops/scripts/agent.py) and the console's end of it (ops/platform/remote_agent.py), over
the pipes of a real agent process on this machine: the same frames an SSH exec channel carries.

- its MessagePack subset speaks the library's bytes both ways (a remote host has no msgpack);
- stat / read / tail answer as the commands did (missing, not a regular file, the limit + 1 byte);
- the process table comes whole, then as change sets that leave this end with the agent's table;
- a filesystem call that hangs holds its own request only, and an agent that stops answering is dropped.
"""
from __future__ import annotations

import asyncio
import importlib.util
import io
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import pytest

from ops.platform.base import SCRIPTS_DIR
from ops.platform.remote_agent import AgentStream, RemoteAgent

AGENT = SCRIPTS_DIR / "agent.py"


def load_agent_module():
    spec = importlib.util.spec_from_file_location("carla_console_agent", AGENT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SAMPLES = [None, True, False, 0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, 2**63 + 5, -1, -32, -33, -129,
           -40000, -2**40, 0.5, -1e300, "", "a", "é" * 20, "x" * 31, "x" * 32, "y" * 300, "z" * 70000, b"",
           b"\x00\xff", b"b" * 300, b"c" * 70000, [], [1, [2, [3]]], list(range(20)), list(range(70000)),
           {}, {"a": 1}, {f"k{i}": i for i in range(20)}, {"rows": [(1, 2, "S", 1.5, "n", ("a", "b")), None]}]


def test_builtin_codec_matches_msgpack_both_ways() -> None:
    mod = load_agent_module()
    mod.msgpack = None   # the codec of a host without the library
    for obj in SAMPLES:
        want = msgpack.unpackb(msgpack.packb(obj, use_bin_type=True), raw=False)
        assert msgpack.unpackb(mod.pack(obj), raw=False) == want, obj
        assert mod.unpack(msgpack.packb(obj, use_bin_type=True)) == want, obj
    # float32 and the small int forms msgpack picks for other values
    for raw in (b"\xca\x3f\xc0\x00\x00", b"\xcc\xff", b"\xcd\x01\x00", b"\xd0\x80", b"\xd1\x80\x00", b"\xd2\xff\xff\xff\xff"):
        assert mod.unpack(raw) == msgpack.unpackb(raw)
    with pytest.raises(ValueError):
        mod.unpack(b"\xd9\x05ab")      # truncated
    with pytest.raises(ValueError):
        mod.unpack(b"\xc1")            # never used


@asynccontextmanager
async def agent_process(*python_flags: str, max_stuck: int = 4) -> AsyncIterator[tuple[RemoteAgent, int]]:
    proc = await asyncio.create_subprocess_exec(sys.executable, *python_flags, str(AGENT), stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    agent = RemoteAgent(AgentStream(proc.stdin.write, proc.stdout.readexactly, proc.stderr.read, proc.stdin.close),
                        "agent on test", max_stuck=max_stuck)
    try:
        await agent.hello(60.0)
        yield agent, proc.pid
    finally:
        agent.close()
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), 10)   # EOF on stdin ends it
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize("flags", [(), ("-S",)], ids=["msgpack", "builtin-codec"])
def test_files_as_the_commands_answer(tmp_path: Path, flags: tuple[str, ...]) -> None:
    log = tmp_path / "log.txt"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"caf\xc3\xa9 \xff\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def go() -> None:
        async with agent_process(*flags) as (agent, _pid):
            assert agent.codec == ("builtin" if flags else "msgpack")
            st = await agent.stat_file(str(log), 5)
            assert st.exists and st.error is None and st.size == log.stat().st_size
            assert st.mtime == pytest.approx(log.stat().st_mtime, abs=1e-6) and st.host_now is not None
            missing = await agent.stat_file(str(tmp_path / "nope" / "x"), 5)
            assert not missing.exists and missing.error is None and missing.host_now is not None
            special = await agent.stat_file(str(fifo), 5)
            assert special.exists and "not a regular file" in (special.error or "")

            whole = await agent.read_text(str(log), 5, limit=1 << 20)
            assert whole.text is not None and whole.text.endswith("café \ufffd\n")
            over = await agent.read_text(str(log), 5, limit=100)
            assert over.text is None and "larger than 100 bytes" in (over.error or "")
            assert (await agent.read_text(str(tmp_path / "nope"), 5, limit=10)).missing
            refused = await agent.read_text(str(fifo), 5, limit=10)   # never blocks on a FIFO
            assert refused.text is None and "not a regular file" in (refused.error or "")

            assert await agent.tail_lines(str(log), 3, 5, max_bytes=4096) == ["line 98", "line 99", "café \ufffd"]
            assert await agent.tail_lines(str(log), 50, 5, max_bytes=20) == [" 98", "line 99", "café \ufffd"]
            assert await agent.tail_lines(str(tmp_path / "nope"), 3, 5, max_bytes=100) is None
            assert await agent.tail_lines(str(fifo), 3, 5, max_bytes=100) is None
    asyncio.run(go())


def test_an_mtime_is_the_float_of_stats_text_to_the_last_bit(tmp_path: Path) -> None:
    """The agent and the commands (`stat -c %.9Y`) must give the same float: a CI run saw ...9392383 from the
    agent against ...9392385 from the commands, the ns rounded to a float before the division."""
    mod = load_agent_module()
    f = tmp_path / "f"
    f.write_text("x")
    ns = 1796228665_939238500   # the CI run's mtime: ns / 1e9 and the text's float differ in the last bit
    os.utime(f, ns=(ns, ns))
    text = f"{ns // 10**9}.{ns % 10**9:09d}"
    assert mod.op_stat(str(f))["mtime"] == float(text)


def test_process_table_whole_then_change_sets() -> None:
    async def go() -> None:
        async with agent_process() as (agent, pid):
            first = await agent.process_table("h", 10, frozenset())
            assert first.ok and agent._requested.seq is not None, first.error
            me = first.procs[os.getpid()]
            assert me.cmdline, me
            assert first.procs[pid].ppid == os.getpid()
            kept = first.procs[1]
            child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "agent-test-token"],
                                     stdin=subprocess.PIPE)
            try:
                async def seen(want: bool) -> None:
                    deadline = time.monotonic() + 60   # a condition with a backstop, not a count of tries
                    while time.monotonic() < deadline:
                        t = await agent.process_table("h", 10, frozenset({child.pid}))
                        assert t.ok, t.error
                        proc = t.procs.get(child.pid)
                        if (proc is not None and proc.has_token("agent-test-token")) == want:
                            # unchanged processes keep their objects: their argv tokens are not rebuilt
                            assert t.procs[1] is kept
                            return
                        await asyncio.sleep(0.05)
                    raise AssertionError(f"child {child.pid} {'never seen' if want else 'still there'}")
                await seen(True)
            finally:
                child.stdin.close()   # type: ignore[union-attr]
                child.wait(10)
            await seen(False)
            # A reply lost to this end (a timeout) leaves it behind the agent: the next one is whole again.
            agent._requested.seq = (agent._requested.seq or 0) - 1
            again = await agent.process_table("h", 10, frozenset())
            assert again.ok and set(again.procs) >= {os.getpid(), pid, 1}
    asyncio.run(go())


def test_a_hung_call_holds_only_its_own_request(tmp_path: Path) -> None:
    """In the agent: each request in a thread, so a stat that blocks (a hard mount whose server is gone)
    leaves the next requests answered."""
    mod = load_agent_module()
    release = threading.Event()
    real_stat = mod.op_stat

    def op_stat(path: str) -> dict:
        if path.endswith("hung"):
            release.wait(30)
        return real_stat(path)
    mod.op_stat = op_stat
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    inp, out = os.fdopen(r_in, "rb"), os.fdopen(w_out, "wb")
    server = threading.Thread(target=mod.serve, args=(inp, out), daemon=True)
    server.start()
    send, recv = os.fdopen(w_in, "wb"), os.fdopen(r_out, "rb")

    def request(rid: int, op: str, args: dict) -> None:
        body = msgpack.packb({"id": rid, "op": op, "args": args})
        send.write(struct.pack(">I", len(body)) + body)
        send.flush()

    def reply() -> dict:
        (n,) = struct.unpack(">I", recv.read(4))
        return msgpack.unpackb(recv.read(n))

    try:
        request(1, "stat", {"path": str(tmp_path / "hung")})
        request(2, "stat", {"path": str(tmp_path)})
        request(3, "nonsense", {})
        got = [reply(), reply()]
        assert sorted(m["id"] for m in got) == [2, 3]
        assert next(m for m in got if m["id"] == 3) == {"id": 3, "ok": False, "error": "ValueError: unknown op 'nonsense'"}
        release.set()
        late = reply()
        assert late["id"] == 1 and late["ok"] and late["value"]["kind"] == "missing"
    finally:
        release.set()
        send.close()
        server.join(10)
        assert not server.is_alive()
        recv.close()
        out.close()


def test_an_agent_that_stops_answering_is_dropped_with_the_reason() -> None:
    async def go() -> None:
        async with agent_process(max_stuck=2) as (agent, pid):
            os.kill(pid, signal.SIGSTOP)
            first = await agent.stat_file("/", 0.3)
            assert first.error is not None and "timeout after 0.3 s" in first.error and agent.usable
            table = await agent.process_table("h", 0.3, frozenset())
            assert table.error is not None and "timeout" in table.error
            assert not agent.usable and "2 requests unanswered" in (agent.closed or "")
            gone = await agent.stat_file("/", 5)    # answered at once, with why
            assert gone.error is not None and "unanswered" in gone.error
    asyncio.run(go())


def test_an_agent_that_ends_fails_what_waits() -> None:
    async def go() -> None:
        async with agent_process() as (agent, pid):
            os.kill(pid, signal.SIGKILL)
            st = await agent.stat_file("/", 5)
            assert st.error is not None and "agent on test" in st.error and not agent.usable
    asyncio.run(go())


def test_a_request_too_big_ends_the_agent_with_its_reason() -> None:
    mod = load_agent_module()
    inp = io.BytesIO(struct.pack(">I", mod.MAX_REQUEST + 1))
    assert mod.serve(inp, io.BytesIO()) == f"request of {mod.MAX_REQUEST + 1} bytes"
    assert mod.serve(io.BytesIO(b""), io.BytesIO()) == "eof"
