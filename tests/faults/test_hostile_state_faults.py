"""Malformed state and special files on a live rig (issue 16, classes 3, 4 and 5): status, launch and
recover answer UNKNOWN with the evidence, never a traceback and never a hang, and the other side is
never held up by the bad one."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ops.config import ConfigError, parse_config
from tests.faults.harness_kit import Audit, Procs, count, plan_keys
from tests.faults.test_identity_faults import _hand_evaluator, _spawn, _stale_log, _stop
from tests.support.evalops_sim import cli, sides, sim_rig, wait_until
from tests.unit import test_config_hostile as hostile
from tests.unit.test_config import VALID, _with

STATUS_TIMEOUT_S = 60.0   # a backstop for the defect (a blocking read), not a speed target


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile") / "sim"
    with sim_rig(d) as rig_yaml:
        yield d, rig_yaml


def _state_file(d: Path, side: str) -> Path:
    return d / "state" / "sides" / side / "harness.json"


def _json(res: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    return json.loads(res.stdout)


@pytest.mark.scenario("malformed-harness-state")
@pytest.mark.parametrize("raw", ["null", '"running"', "42", "[1, 2]", '{"side": "A"}', "{not json"])
def test_a_malformed_harness_state_is_unknown_everywhere(rig, raw: str) -> None:
    d, rig_yaml = rig
    path = _state_file(d, "A")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw)
    try:
        count("hostile 1")
        st = _json(cli(rig_yaml, "status", "--json", timeout=STATUS_TIMEOUT_S))["sides"]
        assert st["A"]["evaluator"]["state"] == "UNKNOWN" and "harness state" in st["A"]["evaluator"]["summary"]
        assert st["B"]["evaluator"]["state"] == "DEAD"              # the other side is read as always
        res = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        assert res.returncode == 3 and "UNKNOWN" in _json(res)["refused"]
        res = cli(rig_yaml, "recover", "A", "--dry-run", "--json", timeout=120)
        assert res.returncode == 3 and _json(res)["refused"]
    finally:
        path.unlink()


@pytest.mark.scenario("special-files-never-block")
@pytest.mark.parametrize("where", ["checkpoint", "harness-state", "log"])
def test_a_fifo_where_a_file_should_be_never_blocks_status(rig, where: str) -> None:
    d, rig_yaml = rig
    from ops.config import load_config
    sc = load_config(rig_yaml).sides["A"]
    path = {"checkpoint": Path(sc.evaluator.path(sc.evaluator.checkpoint)), "harness-state": _state_file(d, "A"),
            "log": Path(sc.evaluator.path(sc.evaluator.log))}[where]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    try:
        count("hostile 1")
        # Before the fix a FIFO checkpoint froze status (and the TUI, both sides) on open().
        st = _json(cli(rig_yaml, "status", "--json", timeout=STATUS_TIMEOUT_S))["sides"]
        assert st["B"]["server"]["state"] == "ALIVE"
        a = st["A"]
        if where == "checkpoint":
            assert a["evaluator"]["progress"] is None and "not a regular file" in a["evaluator"]["progress_error"]
        elif where == "harness-state":
            assert a["evaluator"]["state"] == "UNKNOWN" and "not a regular file" in a["evaluator"]["summary"]
        res = cli(rig_yaml, "launch", "A", "--dry-run", "--json", timeout=120)
        assert res.returncode == 3, res.stdout[-800:]
    finally:
        path.unlink()


@pytest.mark.scenario("log-mtime-in-the-future")
def test_a_log_written_in_the_future_is_not_fresh(rig) -> None:
    d, rig_yaml = rig
    from ops.config import load_config
    sc = load_config(rig_yaml).sides["A"]
    log = Path(sc.evaluator.path(sc.evaluator.log))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("tick\n")
    future = time.time() + 3 * 3600
    os.utime(log, (future, future))
    try:
        count("hostile 1")
        hb = _json(cli(rig_yaml, "status", "--json", "--no-rpc"))["sides"]["A"]["heartbeat"]
        # Not RUNNING, so the shown state is OFF; the measurement itself must not read FRESH.
        assert hb["measured"] == "UNKNOWN" and hb["age_s"] is None
    finally:
        log.unlink()


@pytest.mark.scenario("argv-bytes-not-utf8")
def test_a_chain_member_with_non_utf8_argv_is_recovered_and_audited(rig, tmp_path) -> None:
    d, rig_yaml = rig
    n, tm = sides(d)["B"]["rpc_port"], sides(d)["B"]["tm_port"]
    argv, ready = _hand_evaluator(tmp_path, n, tm, "--agent", "agent\udcff\udcfe.py")
    hand = _spawn([os.fsencode(a) for a in argv])
    try:
        assert wait_until(ready.exists, 30)
        count("hostile 1")
        _stale_log(rig_yaml, "B")
        from tests.faults.common import wait_stale
        wait_stale(rig_yaml, "B")
        plan = _json(cli(rig_yaml, "recover", "B", "--dry-run", "--json", timeout=120))
        assert plan["refused"] is None, plan["refused"]
        planned = plan_keys(plan["kill_plan"])
        assert [t["pid"] for t in plan["kill_plan"]] == [hand.pid]
        audit = Audit(d / "state")
        mark = audit.mark()
        before = Procs.snapshot()
        res = cli(rig_yaml, "recover", "B", "--yes", "--json", timeout=180)
        _json(res)
        assert hand.wait(timeout=30) is not None
        line = audit.need(mark, "stop-chain", "done", planned)
        assert "agent\\xff\\xfe.py" in line["targets"][0]["cmdline"]
        Procs.check(before, planned)
    finally:
        _stop([hand])


@pytest.mark.scenario("hostile-config")
def test_every_hostile_config_is_a_clean_error_naming_file_line_and_key() -> None:
    """The config variants of tests/unit/test_config_hostile.py, counted as inputs of the fault report."""
    file = "/etc/carla-console/rig.yaml"
    texts = [_with(hostile.ARGS, f"args: {{agent: a.py, {inside}}}") for inside, _ in hostile.OWNED_SPELLINGS]
    texts += [_with(old, new) for old, new in NUMBERS]
    texts += [_with('env: {B2D_EXTERNAL_SERVER: "1"}', f"env: {e}") for e in ('{"A=B": "1"}', '{"A\\0B": "1"}')]
    texts += [VALID + "extra: " + "[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000]
    for text in texts:
        count("config 1")
        with pytest.raises(ConfigError) as err:
            parse_config(text, file)
        assert all(i.file == file and i.message for i in err.value.issues)
        assert any(i.line for i in err.value.issues), [str(i) for i in err.value.issues]


NUMBERS = [("max_attempts: 3", "max_attempts: 1000000000000000000000000000000"),
           ("start_wait_s: 30", "start_wait_s: .inf"), ("{stall_s: 1500}", "{stall_s: .nan}"),
           ("name: bench", "name: bench\npoll_s: 1.0e-9"), ("vram_min_delta_mb: 4096", "vram_min_delta_mb: -1")]

