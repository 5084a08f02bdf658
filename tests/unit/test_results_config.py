"""The side key `expect_wall_game_min` (fake-success floor): optional, a positive number, errors named."""
from __future__ import annotations

import pytest

from ops.config import ConfigError, parse_config

BASE = """\
version: 1
hosts:
  here: {type: local, os: linux}
sides:
  a:
    server: {host: here, command: [CarlaUE4.sh], rpc_port: 2000}
    evaluator: {host: here, conda_env: env, cwd: /tmp, script: e.py, routes: r.xml, checkpoint: c.json, log: l.log}
"""


def test_default_is_no_floor():
    assert parse_config(BASE, "rig.yaml").sides["a"].expect_wall_game_min is None


def test_a_floor_is_read():
    rig = parse_config(BASE + "    expect_wall_game_min: 5\n", "rig.yaml")
    assert rig.sides["a"].expect_wall_game_min == 5.0


@pytest.mark.parametrize("value", ["0", "-1", "fast", "[1]"])
def test_bad_floor_named_with_file_line_key(value):
    with pytest.raises(ConfigError) as exc:
        parse_config(BASE + f"    expect_wall_game_min: {value}\n", "rig.yaml")
    text = str(exc.value)
    assert "rig.yaml:8" in text and "sides.a.expect_wall_game_min" in text
