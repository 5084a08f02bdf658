"""WslInteropHost plumbing against a stand-in powershell.exe (no Windows here).

The stand-in decodes -EncodedCommand, reads back FileName / Arguments / deadline from our generated
script and runs that program with the argv a Windows program would see (MS C runtime splitting).
So it checks the chain argv -> script -> base64 -> process -> Result, and the timeout handling.
"""
from __future__ import annotations

import asyncio
import os
import stat
import sys
import time
import uuid

import psutil
import pytest

from ops.model import HostConfig
from ops.platform import powershell as ps
from ops.platform.common import SpawnError
from ops.platform.wsl import WslInteropHost
from tests.unit.test_hosts_powershell import _literal, msvcrt_split

FAKE = r'''
import base64, re, subprocess, sys
sys.path[:0] = [{root!r}]
from tests.unit.test_hosts_powershell import _literal, msvcrt_split
from ops.platform import powershell as ps
a = sys.argv[1:]
assert a[:3] == ["-NoProfile", "-NonInteractive", "-EncodedCommand"], a
script = base64.b64decode(a[3]).decode("utf-16-le")
if "Win32_Process -MethodName Create" in script:
    print(4242)
    sys.exit(0)
exe = _literal(script, "$psi.FileName")
args = msvcrt_split(_literal(script, "$psi.Arguments"))
m = re.search(r"WaitForExit\((-?\d+)\)", script)
ms = int(m.group(1))
try:
    p = subprocess.run([exe, *args], capture_output=True, timeout=None if ms < 0 else ms / 1000)
except FileNotFoundError as e:
    sys.stderr.write(ps.SPAWN_MARKER + str(e) + "\n")
    sys.exit(ps.SPAWN_RC)
except subprocess.TimeoutExpired:
    sys.stderr.write(ps.TIMEOUT_MARKER + "deadline, killed process tree\n")
    sys.exit(ps.TIMEOUT_RC)
sys.stdout.buffer.write(p.stdout)
sys.stderr.buffer.write(p.stderr)
sys.exit(p.returncode)
'''


@pytest.fixture
def wsl(tmp_path) -> WslInteropHost:
    fake = tmp_path / "powershell.exe"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fake.write_text(f"#!{sys.executable}\n" + FAKE.format(root=root))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return WslInteropHost(HostConfig(name="win", type="wsl-interop", os="windows", powershell=str(fake)))


def test_argv_reaches_the_program_exactly(wsl):
    weird = ["a b", "it's", '"q"', "$x", "`b", "", "中文", "trail\\"]
    r = asyncio.run(wsl.run([sys.executable, "-c", "import sys; print(sys.argv[1:])", *weird], 10))
    assert r.ok, r
    assert r.stdout == f"{weird!r}\n"
    assert r.argv[0] == sys.executable  # the Result names the caller's argv, not the base64 blob
    assert wsl.os == "windows"


def test_rc_and_stderr_pass_through(wsl):
    r = asyncio.run(wsl.run([sys.executable, "-c", "import sys; print('e', file=sys.stderr); sys.exit(5)"], 10))
    assert r.rc == 5 and r.stderr == "e\n"


def test_spawn_marker_becomes_spawn_error(wsl):
    r = asyncio.run(wsl.run(["C:\\nope\\x.exe"], 10))
    assert r.rc is None and r.error.startswith("spawn: ")


def test_batch_file_refused(wsl):
    r = asyncio.run(wsl.run(["C:\\x\\start.bat", "a&b"], 10))
    assert r.rc is None and r.error.startswith("spawn: refusing to run a batch file")


def test_client_timeout_kills_the_interop_group(wsl):
    token = f"cc-wsl-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    r = asyncio.run(wsl.run([sys.executable, "-c", "import time; time.sleep(30)", token], 0.8))
    assert r.timed_out and r.error == "timeout after 0.8 s" and time.monotonic() - t0 < 3
    left = [p for p in psutil.process_iter(["cmdline", "status"])
            if token in (p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE]
    for p in left:
        p.kill()
    assert not left


def test_script_deadline_is_after_client_deadline(wsl):
    argv = wsl.argv_for(["x.exe"], 5.0)
    assert "WaitForExit(5500)" in ps.decode_command(argv[-1])
    assert _literal(ps.decode_command(argv[-1]), "$psi.FileName") == "x.exe"
    assert msvcrt_split(_literal(ps.decode_command(argv[-1]), "$psi.Arguments")) == []


def test_spawn_detached(wsl):
    assert asyncio.run(wsl.spawn_detached(["C:\\CARLA\\CarlaUE4.exe", "-carla-rpc-port=2031"])) == 4242
    with pytest.raises(SpawnError, match="env"):
        asyncio.run(wsl.spawn_detached(["x.exe"], env={"A": "1"}))
    with pytest.raises(SpawnError, match="redirect"):
        asyncio.run(wsl.spawn_detached(["x.exe"], log_path="C:\\l.log"))
