"""Config that would reach the evaluator or the console's loops (issue 16, class 3): every console-owned
flag in any form argparse accepts, smuggled env names, non-finite or absurd numbers, a state_dir that is a
file, a file nested thousands deep. Each is a clean ConfigError naming file, line and key, all at once."""
from __future__ import annotations

import os

import pytest

from console.cli.main import main
from ops.config import ConfigError, load_config, owned_flag, parse_config
from tests.unit.test_config import VALID, _with

ARGS = "args: {agent: team_code/agent.py, agent-config: ckpt/, timeout: 600}"

# (the args mapping's inside, the key the error names) — the owned flags by every argparse spelling
OWNED_SPELLINGS = [
    ("resum: 'False'", "resum"), ("po: 24567", "po"), ("traffic-manager-p: 9000", "traffic-manager-p"),
    ("checkpoin: /tmp/other.json", "checkpoin"), ("rout: x.xml", "rout"), ("ho: 10.0.0.9", "ho"),
    ("traffic_manager_port: 9000", "traffic_manager_port"), ("'port=2000': x", "port=2000"),
    ("'--resume=True': x", "--resume=True"), ("r: x", "r"), ("p: 1", "p"), ("traffic: 1", "traffic"),
    ("c: x", "c"), ("'resume': true", "resume"),
]


def _load(tmp_path, text: str):
    f = tmp_path / "rig.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    return err.value.issues, f


@pytest.mark.parametrize("inside,key", OWNED_SPELLINGS, ids=[k for _, k in OWNED_SPELLINGS])
def test_every_argparse_spelling_of_an_owned_flag_is_refused(tmp_path, inside: str, key: str) -> None:
    text = _with(ARGS, f"args: {{agent: team_code/agent.py, {inside}}}")
    issues, f = _load(tmp_path, text)
    hit = [i for i in issues if i.key == f"sides.ue4.evaluator.args.{key}"]
    assert hit and "set by the console" in hit[0].message, [str(i) for i in issues]
    assert hit[0].file == str(f) and hit[0].line == 24


def test_legit_evaluator_args_still_pass() -> None:
    rig = parse_config(_with(ARGS, "args: {agent: a.py, agent-config: c/, timeout: 600, routes-subset: 3, "
                                   "traffic-manager-seed: 1, debug: 0, gpu-rank: 0, record: '', delta: -0.5}"),
                       "/x/rig.yaml")
    keys = [k for k, _ in rig.sides["ue4"].evaluator.args]
    assert keys == ["agent", "agent-config", "timeout", "routes-subset", "traffic-manager-seed", "debug",
                    "gpu-rank", "record", "delta"]


def test_owned_flag_names_what_argparse_would_read() -> None:
    assert owned_flag("po") == "port" and owned_flag("--resum") == "resume"
    assert owned_flag("checkpoin") == "checkpoint" and owned_flag("port=1") == "port"
    assert owned_flag("agent") is None and owned_flag("routes-subset") is None


@pytest.mark.parametrize("inside,problem", [
    ("agent: --port=3000", "starts with '-'"), ("agent: '--resume'", "starts with '-'"),
    ("'': x", "argument name"), ("'a b': x", "argument name"), ("agent: \"a\\0b\"", "NUL"),
    ("timeout: .inf", "finite"), ("timeout: .nan", "finite"),
])
def test_args_that_would_smuggle_an_option_are_refused(tmp_path, inside: str, problem: str) -> None:
    issues, _ = _load(tmp_path, _with(ARGS, f"args: {{{inside}}}"))
    assert any(problem in i.message and i.key.startswith("sides.ue4.evaluator.args") for i in issues), \
        [str(i) for i in issues]


@pytest.mark.parametrize("env", ['{"A=B": "1"}', '{"A\\0B": "1"}', '{"": "1"}', '{A: "x\\0y"}'])
def test_env_names_with_equals_or_nul_are_refused(tmp_path, env: str) -> None:
    issues, _ = _load(tmp_path, _with('env: {B2D_EXTERNAL_SERVER: "1"}', f"env: {env}"))
    assert any(i.key.startswith("sides.ue4.evaluator.env") and i.line == 25 for i in issues), \
        [str(i) for i in issues]


@pytest.mark.parametrize("old,new,key", [
    ("max_attempts: 3", "max_attempts: 1000000000000000000000000000000", "sides.ue4.evaluator.max_attempts"),
    ("max_attempts: 3", "max_attempts: 1.0e+30", "sides.ue4.evaluator.max_attempts"),
    ("start_wait_s: 30", "start_wait_s: .inf", "sides.ue4.server.start_wait_s"),
    ("start_wait_s: 30", "start_wait_s: .nan", "sides.ue4.server.start_wait_s"),
    ("{stall_s: 1500}", "{stall_s: -.inf}", "sides.ue4.heartbeat.stall_s"),
    ("{stall_s: 1500}", "{stall_s: 1.0e+300}", "sides.ue4.heartbeat.stall_s"),
    ("vram_min_delta_mb: 4096", "vram_min_delta_mb: 99999999999", "sides.ue4.server.vram_min_delta_mb"),
    ("adapter_candidates: [0, 2, 1, 3]", "adapter_candidates: [0, 100000]", "sides.ue4.server.adapter_candidates[1]"),
    ("name: bench", "name: bench\npoll_s: 1.0e-9", "poll_s"),
    ("name: bench", "name: bench\npoll_s: .inf", "poll_s"),
    ("max_attempts: 3", "max_attempts: " + "9" * 5000, "sides.ue4.evaluator.max_attempts"),
])
def test_non_finite_or_absurd_numbers_are_refused(tmp_path, old: str, new: str, key: str) -> None:
    issues, _ = _load(tmp_path, _with(old, new))
    assert [i for i in issues if i.key == key and i.line], [str(i) for i in issues]


def test_a_state_dir_that_is_a_file_is_refused(tmp_path) -> None:
    (tmp_path / "state").write_text("not a dir")
    issues, _ = _load(tmp_path, VALID)
    assert [i for i in issues if i.key == "state_dir" and i.line == 3 and "not a directory" in i.message]
    (tmp_path / "state").unlink()
    (tmp_path / "afile").write_text("x")
    issues, _ = _load(tmp_path, _with("state_dir: state", "state_dir: afile/below"))
    assert [i for i in issues if i.key == "state_dir" and "not a directory" in i.message]


@pytest.mark.parametrize("shape", ["flow-list", "flow-map", "block"])
def test_a_deeply_nested_file_is_a_clean_error(tmp_path, capsys, shape: str) -> None:
    n = 20000
    text = {"flow-list": "[" * n + "]" * n, "flow-map": "{a: " * n + "1" + "}" * n,
            "block": "".join("  " * i + "a:\n" for i in range(400))}[shape]
    f = tmp_path / "deep.yaml"
    f.write_text(VALID + "extra: " + text if shape != "block" else text)
    assert main(["-c", str(f), "check-config"]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "Traceback" not in err and "RecursionError" not in err


def test_all_errors_at_once_with_file_line_and_key(tmp_path, capsys) -> None:
    text = _with(ARGS, "args: {resum: 'False', po: 24567, checkpoin: /tmp/other.json}")
    text = text.replace("max_attempts: 3", "max_attempts: 1000000").replace("{stall_s: 1500}", "{stall_s: .inf}")
    text = text.replace('env: {B2D_EXTERNAL_SERVER: "1"}', 'env: {"X=Y": "1"}')
    f = tmp_path / "rig.yaml"
    f.write_text(text)
    assert main(["-c", str(f), "check-config"]) == 2
    err = capsys.readouterr().err
    for key in ("args.resum", "args.po", "args.checkpoin", "max_attempts", "stall_s", "env.X=Y"):
        assert f"{f}:" in err and key in err, (key, err)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_config_that_is_a_fifo_or_endless_is_refused_without_blocking(tmp_path, special: str) -> None:
    if special == "fifo":
        path = tmp_path / "rig.yaml"
        os.mkfifo(path)
    else:
        path = special
    with pytest.raises(ConfigError) as err:
        load_config(path)   # a blocking open or an unbounded read would hang or balloon here
    assert "not a regular file" in str(err.value) or "larger than" in str(err.value)
