"""check-config: every mistake is a clear error naming file, line and key (table-driven)."""
from __future__ import annotations

import textwrap

import pytest

from console.cli.main import main
from ops.config import ConfigError, load_config

VALID = textwrap.dedent("""\
    version: 1
    name: bench
    state_dir: state
    hosts:
      wsl: {type: local, os: linux}
      win: {type: ssh, address: "@gateway", user: carla, os: windows, known_hosts: ~/.ssh/known_hosts}
    sides:
      ue4:
        server:
          host: win
          command: ['C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4.exe', -RenderOffScreen, -nosound]
          rpc_port: 2031
          adapter_candidates: [0, 2, 1, 3]
          vram_min_delta_mb: 4096
          start_wait_s: 30
        evaluator:
          host: wsl
          conda_env: mysim-automot
          cwd: /home/carla/AutoMoT
          script: leaderboard/leaderboard/leaderboard_evaluator.py
          routes: leaderboard/data/bench2drive220.xml
          checkpoint: results/ue4/result.json
          tm_port: 8010
          args: {agent: team_code/agent.py, agent-config: ckpt/, timeout: 600}
          env: {B2D_EXTERNAL_SERVER: "1"}
          log: logs/ue4/eval_attempt.log
          max_attempts: 3
        heartbeat: {stall_s: 1500}
      ue5:
        server:
          host: win
          command: ['C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4.exe', -RenderOffScreen]
          rpc_port: 2041
        evaluator:
          host: wsl
          conda_env: mysim-automot
          cwd: /home/carla/AutoMoT
          script: leaderboard/leaderboard/leaderboard_evaluator.py
          routes: leaderboard/data/bench2drive220.xml
          checkpoint: results/ue5/result.json
          tm_port: 8020
          log: logs/ue5/eval_attempt.log
    """)


def _with(old: str, new: str, count: int = 1) -> str:
    assert old in VALID, old
    return VALID.replace(old, new, count)


def line_of(text: str, where: str | int | tuple[str, int]) -> int:
    """The expected line: given, or the n-th line that holds a needle."""
    if isinstance(where, int):
        return where
    needle, nth = where if isinstance(where, tuple) else (where, 1)
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    return hits[nth - 1]


# (case, config text, expected line (or the text on it), expected key, a fragment of the message)
BAD = [
    ("unknown top key", VALID + "colour: red\n", "colour: red", "colour", "unknown key"),
    ("unknown server key", _with("start_wait_s: 30", "start_wait: 30"), "start_wait: 30", "sides.ue4.server.start_wait",
     "unknown key"),
    ("wrong type port", _with("rpc_port: 2031", "rpc_port: twenty"), "twenty", "sides.ue4.server.rpc_port",
     "must be an integer"),
    ("port out of range", _with("rpc_port: 2031", "rpc_port: 65535"), "65535", "sides.ue4.server.rpc_port",
     "outside 1..65533"),
    ("overlapping server ports", _with("rpc_port: 2041", "rpc_port: 2033"), "rpc_port: 2033", "sides.ue5.server.rpc_port",
     "overlap side ue4"),
    ("shared TM port", _with("tm_port: 8020", "tm_port: 8010"), ("tm_port: 8010", 2), "sides.ue5.evaluator.tm_port",
     "TrafficManagers on one port"),
    ("TM inside server ports", _with("tm_port: 8010", "tm_port: 2032"), "tm_port: 2032", "sides.ue4.evaluator.tm_port",
     "collides with this side's server ports"),
    ("missing conda_env", _with("      conda_env: mysim-automot\n", "", 1), "host: wsl", "sides.ue4.evaluator.conda_env",
     "missing required key"),
    ("unknown host", _with("host: wsl", "host: wls"), "host: wls", "sides.ue4.evaluator.host", "not defined under hosts"),
    ("console-owned --port", _with("timeout: 600}", "timeout: 600, port: 2000}"), "port: 2000}",
     "sides.ue4.evaluator.args.port", "--port is set by the console"),
    ("console-owned --resume", _with("timeout: 600}", "timeout: 600, resume: False}"), "resume: False",
     "sides.ue4.evaluator.args.resume", "--resume is set by the console"),
    ("console-owned --checkpoint", _with("timeout: 600}", "timeout: 600, --checkpoint: x.json}"), "--checkpoint",
     "sides.ue4.evaluator.args.--checkpoint", "--checkpoint is set by the console"),
    ("console-owned --traffic-manager-port", _with("timeout: 600}", "timeout: 600, traffic-manager-port: 1}"), "traffic-manager-port",
     "sides.ue4.evaluator.args.traffic-manager-port", "set by the console"),
    ("console-owned --routes and --host", _with("timeout: 600}", "timeout: 600, host: 1.2.3.4}"), "host: 1.2.3.4",
     "sides.ue4.evaluator.args.host", "set by the console"),
    ("adapter token in server command", _with("-RenderOffScreen, -nosound]", "-RenderOffScreen, -graphicsadapter=1]"),
     "-graphicsadapter=1", "sides.ue4.server.command[2]", "set by the console"),
    ("ssh host without address", _with('address: "@gateway", ', ""), "win: {type: ssh", "hosts.win.address", "needs an address"),
    ("bad host type", _with("type: local", "type: telnet"), "telnet", "hosts.wsl.type", "must be one of"),
    ("version 2", _with("version: 1", "version: 2"), "version: 2", "version", "only version 1"),
    ("side is a list", VALID.split("sides:")[0] + "sides:\n  - ue4\n", "- ue4", "sides", "must be a mapping"),
    ("not yaml", "version: 1\nhosts: [\n", 3, "", "not valid YAML"),
    ("negative stall", _with("stall_s: 1500", "stall_s: -5"), "stall_s: -5", "sides.ue4.heartbeat.stall_s", "must be > 0"),
    ("env value is a list", _with('B2D_EXTERNAL_SERVER: "1"', "B2D_EXTERNAL_SERVER: [1]"), "B2D_EXTERNAL_SERVER: [1]",
     "sides.ue4.evaluator.env.B2D_EXTERNAL_SERVER", "must be a string or number"),
]


def test_valid_config_loads(tmp_path) -> None:
    f = tmp_path / "rig.yaml"
    f.write_text(VALID)
    rig = load_config(f)
    assert set(rig.sides) == {"ue4", "ue5"}
    ue4 = rig.sides["ue4"]
    assert ue4.planned_ports == (2031, 2032, 2033, 8010)
    assert ue4.evaluator.path(ue4.evaluator.checkpoint) == "/home/carla/AutoMoT/results/ue4/result.json"
    assert ue4.evaluator.args == (("agent", "team_code/agent.py"), ("agent-config", "ckpt/"), ("timeout", "600"))
    assert rig.hosts["win"].os == "windows" and rig.hosts["win"].address == "@gateway"
    assert rig.state_dir == str(tmp_path / "state")
    assert main(["-c", str(f), "check-config"]) == 0


@pytest.mark.parametrize("case,text,line,key,fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_config(tmp_path, capsys, case, text, line, key, fragment) -> None:
    f = tmp_path / "rig.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    issues = err.value.issues
    match = [i for i in issues if i.key == key and fragment in i.message]
    assert match, f"{case}: expected {key!r} ~ {fragment!r}, got {[str(i) for i in issues]}"
    line = line_of(text, line)
    assert match[0].line == line, str(match[0])
    assert match[0].file == str(f)
    assert main(["-c", str(f), "check-config"]) == 2
    err_text = capsys.readouterr().err
    assert f"{f}:{line}" in err_text and fragment in err_text and "Traceback" not in err_text


def test_missing_file_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["-c", str(tmp_path / "nope.yaml"), "check-config"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_shared_adapter_warning_when_evaluator_manages_server(tmp_path, capsys) -> None:
    text = _with("rpc_port: 2031", "rpc_port: 2031\n      adapter: 0\n      managed_by_evaluator: true")
    text = text.replace("rpc_port: 2041", "rpc_port: 2041\n      adapter: 0")
    f = tmp_path / "rig.yaml"
    f.write_text(text)
    rig = load_config(f)
    (w,) = [w for w in rig.warnings if "clean_carla.sh" in w]
    # What really happens: the grep kill is a no-op; clean_carla.sh kills every side's server.
    assert "-graphicsadapter=0" in w and "no-op" in w and "killall -9 -r CarlaUE4-Linux" in w
    assert "kills every server with that adapter token" not in w
    assert main(["-c", str(f), "check-config"]) == 0
    assert "warning:" in capsys.readouterr().out
    # Different adapters change nothing: clean_carla.sh does not look at the adapter.
    f.write_text(text.replace("rpc_port: 2041\n      adapter: 0", "rpc_port: 2041\n      adapter: 1"))
    assert any("clean_carla.sh" in w for w in load_config(f).warnings)


def test_a_side_with_type_errors_keeps_its_cross_errors_in_the_same_run(tmp_path, capsys) -> None:
    """One run of check-config lists a side's type errors AND its undefined host, TM collision and port
    overlap (a side that failed to parse used to drop out of the cross-checks: a second, third round)."""
    text = _with("vram_min_delta_mb: 4096", "vram_min_delta_mb: lots")             # ue4: a type error
    text = text.replace("rpc_port: 2041", "rpc_port: 2033\n      start_wait_s: soon")  # ue5: overlap + type error
    text = text.replace("      max_attempts: 3\n", "      max_attempts: many\n")      # ue4: a second type error
    ue5 = text.index("  ue5:")
    head, tail = text[:ue5], text[ue5:]
    tail = tail.replace("host: win", "host: winn", 1).replace("tm_port: 8020", "tm_port: 2034")
    text = head + tail
    f = tmp_path / "rig.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    got = {(i.key, i.line) for i in err.value.issues}
    second = text.index("  ue5:")
    ue5_line = text[:second].count("\n")
    want = {
        ("sides.ue4.server.vram_min_delta_mb", line_of(text, "lots")),
        ("sides.ue4.evaluator.max_attempts", line_of(text, "many")),
        ("sides.ue5.server.start_wait_s", line_of(text, "soon")),
        ("sides.ue5.server.host", line_of(text, "host: winn")),
        ("sides.ue5.evaluator.tm_port", line_of(text, "tm_port: 2034")),   # inside its own server's 2033..2035
        ("sides.ue5.server.rpc_port", line_of(text, "rpc_port: 2033")),   # overlaps ue4's 2031..2033
    }
    assert want <= got, sorted(got)
    assert all(line > ue5_line for key, line in got if key.startswith("sides.ue5"))
    assert main(["-c", str(f), "check-config"]) == 2
    err_text = capsys.readouterr().err
    for key, line in want:
        assert f"{f}:{line}: {key}: " in err_text, (key, err_text)
    assert "Traceback" not in err_text


def test_a_host_with_an_error_is_not_also_undefined_for_its_users(tmp_path) -> None:
    text = _with("wsl: {type: local, os: linux}", "wsl: {type: local, os: linux, memory_floor_mb: lots}")
    f = tmp_path / "rig.yaml"
    f.write_text(text + "engine: slurm\nslurm: {host: wsl}\n")
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert [i.key for i in err.value.issues] == ["hosts.wsl.memory_floor_mb"], [str(i) for i in err.value.issues]
