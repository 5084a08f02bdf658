"""SshHost against a real OpenSSH sshd on 127.0.0.1 (fixtures: tests/support/conftest_ssh.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from ops.platform.common import SpawnError
from ops.platform.ssh import SshHost, posix_command, posix_spawn_command
from sim.procs import wait_until
from tests.support.sshd import keygen

pytestmark = pytest.mark.ssh


def run(coro):
    return asyncio.run(coro)


async def with_host(cfg, fn, **kw):
    host = SshHost(cfg, **kw)
    try:
        return await fn(host)
    finally:
        await host.close()


def live_with_token(token: str) -> list[psutil.Process]:
    """Processes whose argv holds `token` as a whole element (never a substring match), not zombies."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if token in (p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


# -- command building (no server needed) -------------------------------------------------------------

def test_posix_command_quotes_everything():
    cmd = posix_command(["echo", "a b", "it's", "$X", ";rm"], 5.0, env={"K": "v w"}, cwd="/tmp/x y")
    assert cmd == ("cd -- '/tmp/x y' || { printf '%s\\n' 'carla-console-spawn-error: cannot cd to /tmp/x y' "
                   ">&2; exit 127; }; exec timeout -k 2 5.5 env -- 'K=v w' echo 'a b' 'it'\"'\"'s' '$X' ';rm'")
    assert posix_command(["ls"], None) == "exec ls"
    assert posix_command(["ls"], 1, cwd="~/run").startswith("cd -- \"$HOME\"/run ||")
    with pytest.raises(ValueError):
        posix_command(["ls"], 1, env={"A=B": "c"})


def test_posix_spawn_command():
    cmd = posix_spawn_command(["srv", "-p 1"], env={"A": "1"}, log_path="/l og")
    assert cmd == "setsid env -- A=1 srv '-p 1' </dev/null >>'/l og' 2>&1 & echo $!"


def test_unresolved_gateway_is_rejected(ssh_cfg):
    with pytest.raises(ValueError, match="resolved"):
        SshHost(dataclasses.replace(ssh_cfg, address="@gateway"))


def test_windows_command_is_encoded_powershell(tmp_path):
    from ops.model import HostConfig
    from ops.platform import powershell as ps
    h = SshHost(HostConfig(name="win", type="ssh", os="windows", address="10.0.0.5", user="carla",
                           known_hosts=str(tmp_path / "k")))
    cmd = h.command_for(["C:\\CARLA\\CarlaUE4.exe", "-carla-rpc-port=2031", "it's"], 5.0, env={"A": "1"})
    exe, *flags, b64 = cmd.split(" ")
    assert exe == "powershell.exe" and flags == ["-NoProfile", "-NonInteractive", "-EncodedCommand"]
    script = ps.decode_command(b64)
    assert "$psi.FileName = 'C:\\CARLA\\CarlaUE4.exe'" in script
    assert "$psi.Arguments = '-carla-rpc-port=2031 it''s'" in script
    assert "WaitForExit(5500)" in script and "timeout -k" not in cmd
    with pytest.raises(ValueError):
        asyncio.run(SshHost(HostConfig(name="l", type="ssh", address="h")).run_powershell("x", 1))


def test_host_survives_a_second_event_loop(ssh_cfg):
    h = SshHost(ssh_cfg)
    assert asyncio.run(h.run(["true"], 10)).ok
    assert asyncio.run(h.run(["true"], 10)).ok   # a new loop: reconnects instead of failing
    assert h.connect_count == 2
    asyncio.run(h.close())
    # The first loop's connection could not be closed from the second loop; it goes with GC.
    import gc
    gc.collect()


# -- against sshd ------------------------------------------------------------------------------------

def test_runs_over_one_reused_connection(ssh_cfg, sshd):
    async def body(h: SshHost):
        results = [await h.run(["echo", str(i)], 10) for i in range(5)]
        results += await asyncio.gather(*(h.run(["echo", str(i)], 10) for i in range(5, 10)))
        mine = [c for c in psutil.Process().net_connections("tcp")
                if c.raddr and c.raddr.port == sshd.port and c.status == psutil.CONN_ESTABLISHED]
        return results, mine, h.connect_count

    results, conns, count = run(with_host(ssh_cfg, body))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    assert all(r.ok for r in results)
    assert count == 1 and len(conns) == 1, conns


def test_rc_stderr_env_cwd_quoting(ssh_cfg, tmp_path):
    code = "import os,sys; print(os.environ['CC_E'], os.getcwd(), sys.argv[1:]); print('e', file=sys.stderr); sys.exit(4)"
    weird = ["a b", "it's", '"q"', "$HOME", "`id`", "; echo pwned", "ünï", ""]

    async def body(h):
        return await h.run([sys.executable, "-c", code, *weird], 10, env={"CC_E": "x 'y'"}, cwd=str(tmp_path))

    r = run(with_host(ssh_cfg, body))
    assert r.rc == 4 and r.stderr == "e\n" and r.error is None
    assert r.stdout == f"x 'y' {tmp_path} {weird!r}\n"


def test_killed_by_signal_is_negative_rc(ssh_cfg):
    r = run(with_host(ssh_cfg, lambda h: h.run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], 10)))
    assert r.rc == -9 and r.error is None and r.why() == "exit -9"


def test_spawn_errors_remote(ssh_cfg, tmp_path):
    async def body(h):
        return (await h.run(["/nonexistent/tool"], 10), await h.run(["true"], 10, cwd=str(tmp_path / "no")))

    missing, badcwd = run(with_host(ssh_cfg, body))
    assert missing.rc is None and missing.error.startswith("spawn: ") and "/nonexistent/tool" in missing.error
    assert badcwd.rc is None and badcwd.error == f"spawn: cannot cd to {tmp_path / 'no'}"


def test_unknown_host_key_is_refused(ssh_cfg, tmp_path, sshd):
    kh = tmp_path / "empty_known_hosts"
    kh.write_text("")
    r = run(with_host(dataclasses.replace(ssh_cfg, known_hosts=str(kh)), lambda h: h.run(["true"], 10)))
    assert r.rc is None and r.error.startswith("transport: host key for 127.0.0.1:")
    assert f"is not in {kh} (or changed)" in r.error
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in r.error


def test_missing_known_hosts_is_refused(ssh_cfg, tmp_path, sshd):
    kh = tmp_path / "absent"
    r = run(with_host(dataclasses.replace(ssh_cfg, known_hosts=str(kh)), lambda h: h.run(["true"], 10)))
    assert r.rc is None and f"known_hosts file {kh} does not exist" in r.error
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in r.error


def test_changed_host_key_is_refused(ssh_cfg, tmp_path, sshd):
    other = keygen(tmp_path / "other_host", "impostor")
    kh = sshd.write_known_hosts(tmp_path / "changed_known_hosts", pub=other)
    r = run(with_host(dataclasses.replace(ssh_cfg, known_hosts=str(kh)), lambda h: h.run(["true"], 10)))
    assert r.rc is None and r.error.startswith("transport: host key for ") and "ssh-keyscan" in r.error


ORPHAN_CODE = """\
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
time.sleep(60)
"""


def test_remote_timeout_leaves_no_orphan(ssh_cfg):
    token = f"cc-orphan-{uuid.uuid4().hex}"

    async def body(h):
        task = asyncio.ensure_future(h.run([sys.executable, "-c", ORPHAN_CODE, token], 1.0))
        seen = 0
        while not task.done():
            seen = max(seen, len(live_with_token(token)))
            await asyncio.sleep(0.05)
        return await task, seen

    r, seen = run(with_host(ssh_cfg, body))
    assert r.timed_out and r.rc is None and r.error == "timeout after 1.0 s"
    # `timeout` (its argv holds the token too), the command and its child
    assert seen == 3, "the remote command and its child should have been running"
    deadline = time.monotonic() + 5.0   # remote backstop: T + 0.5 s, then KILL after 2 s
    while live_with_token(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = live_with_token(token)
    for p in left:  # never leave them behind, even when failing
        p.kill()
    assert not left, f"orphans: {[p.pid for p in left]}"


def test_more_concurrent_commands_than_maxsessions(ssh_cfg):
    async def body(h):
        return await asyncio.gather(*(h.run(["sh", "-c", f"sleep 0.2; echo {i}"], 20) for i in range(12))), \
            h.connect_count

    results, count = run(with_host(ssh_cfg, body))
    assert [r.error for r in results] == [None] * 12
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert count == 1


def test_without_the_semaphore_maxsessions_bites(ssh_cfg):
    # The control for the test above: let 14 channels open at once and OpenSSH refuses the 11th.
    async def body(h):
        return await asyncio.gather(*(h.run(["sleep", "1"], 20) for i in range(14)))

    results = run(with_host(ssh_cfg, body, max_sessions=14))
    refused = [r for r in results if r.error]
    assert refused and all(r.error.startswith("transport: channel open failed") for r in refused)
    assert sum(r.ok for r in results) == 10


def test_sshd_down_is_transport_error_and_pool_reconnects(ssh_cfg, sshd):
    async def body(h):
        assert (await h.run(["true"], 10)).ok
        task = asyncio.ensure_future(h.run(["sleep", "5"], 10))
        await asyncio.sleep(0.4)
        sshd.stop()                              # listener and its per-connection processes
        lost = await task
        refused = await h.run(["true"], 10)
        fast = await h.run(["true"], 10)         # within retry_s: the remembered failure, no new attempt
        sshd.start()
        await asyncio.sleep(h.retry_s)
        back = await h.run(["echo", "back"], 10)
        return lost, refused, fast, back, h.connect_count

    try:
        lost, refused, fast, back, count = run(with_host(ssh_cfg, body, retry_s=0.3))
    finally:
        if sshd.proc is None or sshd.proc.poll() is not None:
            sshd.start()
    assert lost.rc is None and lost.error.startswith("transport: "), lost
    assert refused.rc is None and refused.error.startswith("transport: connect to ") and "Refused" in refused.error
    assert fast.error.startswith("transport: ") and "retrying after" in fast.error
    assert back.ok and back.stdout == "back\n"
    assert count == 2


def test_spawn_detached_remote(ssh_cfg, tmp_path):
    log = tmp_path / "remote.log"
    token = f"cc-detached-{uuid.uuid4().hex}"

    async def body(h):
        pid = await h.spawn_detached([sys.executable, "-c", "import os,time; print('up', os.environ['CC_R'], "
                                      "flush=True); time.sleep(30)", token],
                                     env={"CC_R": "7"}, cwd=str(tmp_path), log_path=str(log))
        return pid

    pid = run(with_host(ssh_cfg, body))
    try:
        p = psutil.Process(pid)
        # The pid is the background job's: a forked shell, then `setsid` (the token is already in its argv,
        # but its setsid() call is still to come), then the command itself under the same pid. A loaded
        # machine stretches those windows: wait for the command itself.
        assert wait_until(lambda: p.cmdline()[:1] == [sys.executable] and token in p.cmdline(), 10), p.cmdline()
        assert os.getsid(pid) == pid and p.cwd() == str(tmp_path)
        assert wait_until(lambda: "up 7" in (log.read_text() if log.exists() else ""), 10)

        def session_gone() -> bool:   # the ssh session's processes (sshd and its shell) have all ended
            try:
                return not any(a.name().startswith("sshd") for a in p.parents())
            except psutil.NoSuchProcess:
                return True           # gone itself: the assertion below says so
        assert wait_until(session_gone, 10), [a.name() for a in p.parents()]
        assert p.is_running(), "the detached process died with the ssh session"
    finally:
        os.kill(pid, signal.SIGKILL)


def test_spawn_detached_remote_bad_cwd(ssh_cfg, tmp_path):
    with pytest.raises(SpawnError, match="cannot cd to"):
        run(with_host(ssh_cfg, lambda h: h.spawn_detached(["true"], cwd=str(tmp_path / "none"))))


def test_output_capped_remote(ssh_cfg):
    r = run(with_host(ssh_cfg, lambda h: h.run([sys.executable, "-c", "print('y' * 50000)"], 10),
                      max_output=2000))
    assert r.rc == 0 and r.stdout.startswith("y" * 2000) and "truncated after 2000 bytes" in r.stdout


def test_unused_path_is_fine(tmp_path: Path):
    # Building a host opens nothing: connection is lazy.
    from ops.model import HostConfig
    h = SshHost(HostConfig(name="x", type="ssh", address="127.0.0.1", port=1, known_hosts=str(tmp_path / "k")))
    assert h.connect_count == 0 and h.label == "x (127.0.0.1:1)"
