"""A zombie whose other threads still run has not exited: every reader of /proc says `Zl`, not Z.

When a multi-threaded process exits, its main thread can be a zombie while its other threads are still
running or closing: they hold its sockets (a server's RPC port still accepts) and its GPU memory. A CI run
saw both stop targets of a hung server read "terminated" while its port still answered, because the guard
counted the zombie leader as gone. Here a real process is put in that state (its main thread calls
pthread_exit while a second thread holds a listening socket) and read by each /proc reader: the local
scanner, the remote agent, the stdlib proctable script, signal_if.py; then the guard's wait.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ops.actions.guard import Guard, Target
from ops.model import HostConfig
from ops.platform.base import SCRIPTS_DIR
from ops.platform.factory import make_host
from ops.platform.procs import ZOMBIE_LEADER, LocalProcScanner, read_proc
from sim.procs import wait_until

HOLDER = """
import ctypes, socket, sys, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
def hold():
    sys.stdin.read()   # until the test closes our stdin
    s.close()
threading.Thread(target=hold).start()
ctypes.CDLL(None).pthread_exit(None)   # the main thread exits; the process does not
"""


@contextmanager
def zombie_leader() -> Iterator[tuple[subprocess.Popen, int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert wait_until(lambda: (p := read_proc(proc.pid)) is not None and p.state.startswith("Z"), 10)
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def accepts(port: int) -> bool:
    with socket.socket() as c:
        return c.connect_ex(("127.0.0.1", port)) == 0


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"carla_console_{name}", SCRIPTS_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_reader_says_zl_while_a_thread_holds_the_port_and_z_once_it_has_gone() -> None:
    agent = load_script("agent")
    with zombie_leader() as (proc, port):
        assert accepts(port)                                   # the port is held: the process has not exited
        assert read_proc(proc.pid).state == ZOMBIE_LEADER      # type: ignore[union-attr]
        assert LocalProcScanner().scan().procs[proc.pid].state == ZOMBIE_LEADER
        assert agent.read_stat(proc.pid)[1] == ZOMBIE_LEADER
        rows = json.loads(subprocess.run([sys.executable, str(SCRIPTS_DIR / "proctable.py")], check=True,
                                         capture_output=True, text=True).stdout)
        assert {r["pid"]: r["state"] for r in rows}[proc.pid] == ZOMBIE_LEADER

        assert proc.stdin is not None
        proc.stdin.close()                                     # the thread lets go and exits
        proc.wait(10)
        # Reaped now; before the reap a zombie with nothing left reads Z, as before.
        assert read_proc(proc.pid) is None


def test_signal_if_signals_the_exiting_process_and_the_guard_waits_for_its_threads() -> None:
    with zombie_leader() as (proc, port):
        planned = ["python", "holder"]   # its argv at plan time; a zombie's cmdline reads empty now
        out = subprocess.run([sys.executable, str(SCRIPTS_DIR / "signal_if.py"), str(proc.pid),
                              repr(read_proc(proc.pid).create_time), "SIGCONT", json.dumps(planned)],  # type: ignore[union-attr]
                             check=True, capture_output=True, text=True).stdout
        assert json.loads(out)["outcome"] == "sent", out       # the planned process, exiting: not "changed"

        async def go() -> tuple[list, list]:
            host = make_host(HostConfig("local", "local"))
            guard = Guard({"local": host}, audit=None)  # type: ignore[arg-type]
            p = read_proc(proc.pid)
            assert p is not None
            t = Target.of("local", p, "server")
            held = await guard._wait_gone([t], 0.5)             # the thread holds on: not gone
            assert proc.stdin is not None
            proc.stdin.close()
            gone = await guard._wait_gone([t], 10.0)
            return held, gone

        held, gone = asyncio.run(go())
        assert [t.pid for t in held] == [proc.pid] and gone == []
        assert not accepts(port)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc")
def test_a_plain_zombie_still_reads_z() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert wait_until(lambda: (p := read_proc(child.pid)) is not None and p.state.startswith("Z"), 10)
    assert read_proc(child.pid).state == "Z"                   # type: ignore[union-attr]
    child.wait()
