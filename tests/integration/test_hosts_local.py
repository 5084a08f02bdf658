"""LocalHost: real subprocesses; every test reaps what it starts (by pid)."""
from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import psutil
import pytest

from ops.platform.common import SpawnError
from ops.platform.local import LocalHost, spawn_detached
from sim.procs import wait_until


def run(coro):
    return asyncio.run(coro)


def gone(pid: int) -> bool:
    """No live process with this pid. A zombie counts as gone: here PID 1 may never reap re-parented
    children, and a zombie runs nothing."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return gone(pid)


@pytest.fixture
def host() -> LocalHost:
    return LocalHost()


def test_ok_rc_stdout_stderr(host):
    r = run(host.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                     5))
    assert (r.rc, r.stdout, r.stderr, r.error, r.timed_out) == (3, "out\n", "err\n", None, False)
    assert not r.ok and r.why() == "exit 3: err"
    ok = run(host.run(["true"], 5))
    assert ok.ok and ok.argv == ("true",) and ok.took_s > 0


def test_killed_by_signal_is_negative_rc(host):
    r = run(host.run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], 5))
    assert r.rc == -9 and r.error is None


def test_argv_is_not_a_shell(host):
    r = run(host.run(["echo", "$HOME", "; rm -rf /", "a'b\"c", "`id`"], 5))
    assert r.stdout == "$HOME ; rm -rf / a'b\"c `id`\n"
    with pytest.raises(TypeError):
        run(host.run("echo hi", 5))  # a string is a caller bug, never split or shelled


def test_utf8_replace(host):
    r = run(host.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'caf\\xc3\\xa9 \\xff!')"], 5))
    assert r.stdout == "café \ufffd!"


def test_output_is_capped():
    h = LocalHost(max_output=1000)
    r = run(h.run([sys.executable, "-c", "import sys; sys.stdout.write('x' * 100000)"], 5))
    assert r.rc == 0 and r.stdout.startswith("x" * 1000) and "truncated after 1000 bytes" in r.stdout
    assert len(r.stdout) < 1100


def test_spawn_errors(host, tmp_path):
    r = run(host.run(["/nonexistent/tool", "x"], 5))
    assert r.rc is None and r.error.startswith("spawn: ") and "No such file" in r.error
    f = tmp_path / "notexec"
    f.write_text("#!/bin/sh\n")
    r = run(host.run([str(f)], 5))
    assert r.rc is None and r.error.startswith("spawn: ") and "Permission denied" in r.error
    r = run(host.run(["true"], 5, cwd=str(tmp_path / "nope")))
    assert r.rc is None and r.error.startswith("spawn: ")
    r = run(host.run(["true"], 5, env={"A=B": "x"}))
    assert r.rc is None and r.error.startswith("spawn: invalid environment variable")


def test_env_is_added_to_inherited_and_cwd(host, tmp_path, monkeypatch):
    monkeypatch.setenv("CC_INHERITED", "yes")
    code = "import os; print(os.environ['CC_INHERITED'], os.environ['CC_NEW'], os.getcwd())"
    r = run(host.run([sys.executable, "-c", code], 5, env={"CC_NEW": "a b 'c'"}, cwd=str(tmp_path)))
    assert r.stdout.split("\n")[0] == f"yes a b 'c' {tmp_path}"


GROUP_SCRIPT = """\
import subprocess, sys, time
# A grandchild in the same process group, which ignores nothing: the group kill must reach it.
child = subprocess.Popen(["sleep", "30"])
print(child.pid, flush=True)
time.sleep(30)
"""


def test_timeout_kills_whole_group(host, tmp_path):
    script = tmp_path / "spawner.py"
    script.write_text(GROUP_SCRIPT)
    t0 = time.monotonic()
    # 3 s: long enough for the script to start and print on a loaded machine, short beside its 30 s sleep.
    r = run(host.run([sys.executable, str(script)], 3.0))
    took = time.monotonic() - t0
    assert r.timed_out and r.rc is None and r.error == "timeout after 3.0 s"
    grandchild = int(r.stdout.split()[0])
    assert took < 15.0                     # the timeout ended it, not the script's 30 s
    assert wait_gone(grandchild, 5.0), f"grandchild {grandchild} survived the timeout"


def test_timeout_kills_term_ignoring_group_with_kill(host, tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "import os\nprint(os.getpid(), flush=True)\ntime.sleep(30)\n")
    r = run(host.run([sys.executable, str(script)], 3.0))
    assert r.timed_out
    pid = int(r.stdout.split()[0])
    assert wait_gone(pid, 5.0)


def test_leftover_group_members_are_stopped(host):
    # The leader exits at once, leaving a background member that holds no pipe: it would be an orphan.
    r = run(host.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], 5))
    assert r.ok
    assert wait_gone(int(r.stdout), 2.0)


def test_cancel_kills_group(host, tmp_path):
    script = tmp_path / "spawner.py"
    script.write_text(GROUP_SCRIPT)
    pidfile = tmp_path / "pids"

    async def main():
        task = asyncio.ensure_future(host.run(["sh", "-c", f'echo $$ > {pidfile}; exec "$0" "$1"',
                                               sys.executable, str(script)], 30))
        for _ in range(200):
            await asyncio.sleep(0.02)
            if pidfile.exists() and pidfile.read_text().strip():
                break
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    leader = int(pidfile.read_text())
    assert wait_gone(leader, 2.0)


def test_spawn_detached_survives_and_logs(tmp_path):
    log = tmp_path / "d.log"
    log.write_text("before\n")
    pid = spawn_detached([sys.executable, "-c", "import os,sys,time; print('hello', os.environ['CC_D']); "
                          "print('oops', file=sys.stderr); sys.stdout.flush(); time.sleep(30)"],
                         env={"CC_D": "1"}, cwd=str(tmp_path), log_path=str(log))
    try:
        p = psutil.Process(pid)
        assert os.getsid(pid) == pid, "not in its own session"
        assert p.cwd() == str(tmp_path)
        # stderr is unbuffered and stdout is a file (block-buffered until the flush): "oops" lands first,
        # "hello 1" at the flush. Wait for both.
        assert wait_until(lambda: "hello 1" in log.read_text() and "oops" in log.read_text(), 10), log.read_text()
        assert log.read_text().startswith("before\n")
        fds = {f.path for f in p.open_files()}
        assert str(log) in fds
        with open(f"/proc/{pid}/fd/0") as f0:
            assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull, f0
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 2.0)


def test_spawn_detached_errors(tmp_path):
    with pytest.raises(SpawnError, match="spawn: .*No such file"):
        spawn_detached(["/nonexistent/x"])
    with pytest.raises(SpawnError, match="cannot open log"):
        spawn_detached(["true"], log_path=str(tmp_path / "no" / "dir" / "x.log"))


def test_host_spawn_detached(host, tmp_path):
    pid = run(host.spawn_detached(["sleep", "30"], log_path=str(tmp_path / "l")))
    try:
        assert psutil.Process(pid).cmdline() == ["sleep", "30"]
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 2.0)
