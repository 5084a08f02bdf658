"""Remote evaluator hosts, the parts that need no sshd (ops/actions/remote.py): what is refused and why, the
rig as the remote supervisor sees it (`--as-host`), its argv, and the harness state read through a host."""
from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from console.cli.main import main
from ops.actions import remote
from ops.config import ConfigError, load_config
from ops.platform.types import FileText
from ops.probes.harness_state import HarnessState, read_state_on, state_path

RIG = textwrap.dedent("""\
    version: 1
    name: lab
    state_dir: state
    hosts:
      here: {type: local}
      gpu1: {type: ssh, address: gpu1.lab, user: carla, console_python: /opt/cc/bin/python}
      gpu2: {type: ssh, address: gpu2.lab}
      win: {type: ssh, address: win.lab, os: windows}
    sides:
      a: &side
        server: {host: gpu1, command: [/opt/carla/CarlaUE4.sh], rpc_port: 2000}
        evaluator: {host: gpu1, conda_env: b2d, cwd: /home/carla/b2d, script: ev.py, routes: r.xml,
                    checkpoint: res/a.json, log: logs/a.log, tm_port: 8000}
      b:
        server: {host: gpu1, command: [/opt/carla/CarlaUE4.sh], rpc_port: 2010}
        evaluator: {host: gpu2, conda_env: b2d, cwd: /home/carla/b2d, script: ev.py, routes: r.xml,
                    checkpoint: res/b.json, log: logs/b.log, tm_port: 8010}
      c:
        server: {host: win, command: ['C:\\\\CARLA\\\\CarlaUE4.exe'], rpc_port: 2020}
        evaluator: {host: win, conda_env: b2d, cwd: /home/carla/b2d, script: ev.py, routes: r.xml,
                    checkpoint: res/c.json, log: logs/c.log, tm_port: 8020}
      d:
        server: {host: gpu1, command: [/opt/carla/CarlaUE4.sh], rpc_port: 2030}
        evaluator: {host: here, conda_env: b2d, cwd: /home/carla/b2d, script: ev.py, routes: r.xml,
                    checkpoint: res/d.json, log: logs/d.log, tm_port: 8030}
    """)


class FakeHost:
    """Just enough of a Host for the pure parts: a name, an OS, not local, files answered from a dict."""

    def __init__(self, name: str, os: str = "linux", files: dict[str, str] | None = None) -> None:
        self.name, self.os, self.is_local = name, os, False
        self.files = files or {}
        self.platform = self

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        if path not in self.files:
            return FileText(None, missing=True)
        text = self.files[path]
        return FileText(None, error="larger than the limit") if len(text) > limit else FileText(text)


@pytest.fixture
def rig(tmp_path: Path):
    p = tmp_path / "rig.yaml"
    p.write_text(RIG)
    return load_config(p)


def test_a_side_wholly_on_an_ssh_linux_host_is_supported(rig) -> None:
    assert remote.refusal(rig, FakeHost("gpu1"), rig.side("a")) is None


def test_a_server_on_a_third_host_is_refused_naming_both(rig) -> None:
    why = remote.refusal(rig, FakeHost("gpu2"), rig.side("b"))
    assert why is not None and "gpu1" in why and "gpu2" in why and "third host" in why


def test_a_windows_evaluator_host_is_refused(rig) -> None:
    why = remote.refusal(rig, FakeHost("win", os="windows"), rig.side("c"))
    assert why is not None and "not this machine and not an ssh Linux host" in why


def test_the_remote_supervisor_sees_its_host_as_local_and_only_its_sides(rig) -> None:
    view = remote.on_host(rig, "gpu1")
    assert set(view.hosts) == {"gpu1"} and view.hosts["gpu1"].type == "local"
    assert set(view.sides) == {"a"}          # b's evaluator, c, d's evaluator are elsewhere
    assert (view.path, view.name, view.state_dir) == (rig.path, rig.name, rig.state_dir)
    assert view.engine == "process" and view.slurm is None


def test_the_remote_harness_argv_names_its_host_and_the_hosts_python(rig) -> None:
    argv = remote.harness_argv(rig, "a", "gpu1")
    assert argv == ["/opt/cc/bin/python", "-m", "console", "-c", rig.path, "harness", "a", "--as-host", "gpu1"]
    import sys
    assert remote.harness_argv(rig, "b", "gpu2")[0] == sys.executable   # no console_python: the same path


def test_console_python_of_the_wrong_type_names_file_line_and_key(tmp_path: Path) -> None:
    p = tmp_path / "rig.yaml"
    p.write_text(RIG.replace("console_python: /opt/cc/bin/python", "console_python: [1]"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "hosts.gpu1.console_python" in str(e.value) and f"{p}:6" in str(e.value)


def test_harness_as_host_refuses_an_unknown_host_and_a_side_not_on_it(rig, capsys) -> None:
    assert main(["-c", rig.path, "harness", "a", "--as-host", "nowhere"]) == 2
    assert "no such host" in capsys.readouterr().err
    assert main(["-c", rig.path, "harness", "b", "--as-host", "gpu2"]) == 2
    assert "does not run wholly on gpu2" in capsys.readouterr().err


def test_the_console_reads_a_remote_sides_state_through_its_host(rig) -> None:
    path = str(state_path(rig, "a"))
    st = HarnessState(side="a", pid=4242, create_time=1.5, max_attempts=3, status="running", attempt=2)
    host = FakeHost("gpu1", files={path: json.dumps(st.to_json())})
    got = asyncio.run(read_state_on(host, rig, "a", 1.0))
    assert isinstance(got, HarnessState) and (got.pid, got.attempt, got.status) == (4242, 2, "running")
    assert asyncio.run(read_state_on(FakeHost("gpu1"), rig, "a", 1.0)) is None
    bad = asyncio.run(read_state_on(FakeHost("gpu1", files={path: "null"}), rig, "a", 1.0))
    assert isinstance(bad, str) and "gpu1" in bad   # UNKNOWN with the raw reason, never "no run"


def test_remote_resume_decision_reads_the_checkpoint_on_the_host(rig) -> None:
    sc = rig.side("a")
    cp_path = sc.evaluator.path(sc.evaluator.checkpoint)
    host = FakeHost("gpu1", files={cp_path: "{half-written"})
    decision, cp, _ = asyncio.run(remote.decide_on(host, sc))
    assert decision.verdict == "UNKNOWN" and decision.refused   # half-written: refused, never "empty"
    decision, cp, _ = asyncio.run(remote.decide_on(FakeHost("gpu1"), sc))
    assert decision.verdict == "ABSENT" and cp.data is None


def test_a_file_written_on_a_host_is_exact_and_never_shell_text(tmp_path: Path) -> None:
    from ops.platform.local import LocalHost
    host = LocalHost("here", "linux")
    text = json.dumps({"routes": ["RouteScenario_1'; touch pwned; echo '$(id)`id`"], "at": 1.0})
    path = tmp_path / "putback.json"
    assert asyncio.run(remote.write_file(host, str(path), text)) is None
    assert path.read_text() == text and not (tmp_path / "pwned").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["putback.json"]   # no temp file left
    why = asyncio.run(remote.write_file(host, str(tmp_path / "missing" / "x.json"), text))
    assert why is not None and "here" in why


def test_liveness_on_a_host_is_pid_and_create_time(tmp_path: Path) -> None:
    import os

    from ops.platform.local import LocalHost
    from ops.platform.procs import read_proc
    me = read_proc(os.getpid())
    assert me is not None
    host = LocalHost("here", "linux")
    assert asyncio.run(remote.alive_on(host, me.pid, me.create_time)) is True
    assert asyncio.run(remote.alive_on(host, me.pid, me.create_time - 5)) is False   # a recycled pid
