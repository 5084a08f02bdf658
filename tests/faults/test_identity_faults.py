"""Whose process is it, is the side busy, races (issue 16, classes 1, 2 and 6), on real processes.

Each scenario plants what an operator's machine really holds — a `watch pgrep` carrying the server's
marker, an evaluator started by hand in a tmux session beside an unrelated job, a client that is no
evaluator of the side, a second launch at the same instant, a harness started from a copy of the rig
file — and checks that only the side's own processes are planned, touched and audited.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from ops.config import load_config
from ops.platform.procs import read_proc
from tests.faults.common import inject, wait_stale
from tests.faults.harness_kit import Audit, Procs, Records, alive, checkpoint_path, count, key, plan_keys
from tests.support.evalops_sim import _harness_pids, cli, harness_state, sides, sim_rig, wait_until

HAND_EVALUATOR = """\
import socket, sys, time
# A hand-started evaluator: it connects to the server (a client) and then hangs, writing nothing.
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.create_connection(("127.0.0.1", port))
open(sys.argv[-1], "w").write("connected")
time.sleep(3600)
"""


@pytest.fixture
def rig(tmp_path):
    d = tmp_path / "sim"
    with sim_rig(d) as rig_yaml:
        yield d, rig_yaml


def _spawn(argv: list, **kw) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kw)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _stale_log(rig_yaml: Path, side: str) -> None:
    """The side's log exists and has not moved for a long time: the heartbeat of a hung evaluator."""
    sc = load_config(rig_yaml).sides[side]
    log = Path(sc.evaluator.path(sc.evaluator.log))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("old\n")
    past = time.time() - 600
    os.utime(log, (past, past))


def _hand_evaluator(tmp: Path, port: int, tm: int | None, *extra) -> tuple[list, Path]:
    """argv of a hand-started evaluator (the side's script name), and the file it writes once connected."""
    script = tmp / "hand" / "leaderboard_evaluator.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(HAND_EVALUATOR)
    ready = tmp / "hand" / f"connected-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, str(script), "--port", str(port), *extra]
    if tm is not None:
        argv += ["--traffic-manager-port", str(tm)]
    return argv + [str(ready)], ready


def _status(rig_yaml: Path, timeout: float = 60) -> dict:
    res = cli(rig_yaml, "status", "--json", timeout=timeout)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout[-800:] + res.stderr[-2000:]
    return json.loads(res.stdout)["sides"]


# ---- class 1: the server is the server program ---------------------------------------------------------

@pytest.mark.scenario("strangers-with-the-server-marker")
def test_processes_with_the_marker_that_are_not_the_server_are_never_its(rig, tmp_path) -> None:
    d, rig_yaml = rig
    n = sides(d)["A"]["rpc_port"]
    marker = f"-carla-rpc-port={n}"
    decoys = [_spawn([sys.executable, "-c", "import time; time.sleep(3600)", marker]),
              _spawn(["bash", "-c", "sleep 3600", "CarlaUE4.sh", marker]),
              _spawn([sys.executable, "-c", "import time; time.sleep(3600)", "CarlaUE4-Linux-Shipping", marker])]
    # `watch` needs a terminal: in tmux, as an operator runs it (the tmux server then carries the marker too).
    sock = f"carla-faults-{uuid.uuid4().hex[:8]}"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "100", "-y", "20", "watch", "-n", "600",
                    "pgrep", "-af", "--", marker], check=True, timeout=30)
    try:
        def strangers() -> set[int]:
            real = {p.pid for p in _server_procs(d, "A")}
            found = set()
            for name in os.listdir("/proc"):
                q = read_proc(int(name)) if name.isdigit() else None
                # (watch's own pgrep comes and goes every run: not a long-lived decoy to check on)
                if q is not None and q.state != "Z" and q.cmdline and marker in q.cmdline and q.pid not in real \
                        and os.path.basename(q.cmdline[0]) != "pgrep":
                    found.add(q.pid)
            return found
        def lasting() -> set[int] | None:
            """Strangers seen in two scans a moment apart (tmux's client and watch's runs come and go)."""
            first = strangers()
            time.sleep(0.5)
            both = first & strangers()
            return both if len(both) >= len(decoys) + 1 else None
        decoy_pids = wait_until(lasting, 20)
        assert decoy_pids, strangers()                              # 3 decoys, tmux's server, watch
        count(f"hostile {len(decoy_pids)}")
        st = _status(rig_yaml)["A"]
        assert st["server"]["state"] == "ALIVE" and st["server"]["pid"] not in decoy_pids
        assert st["idle"] is True                                   # no evaluator, no client: IDLE
        before = Procs.snapshot()
        audit = Audit(d / "state")
        mark = audit.mark()
        res = cli(rig_yaml, "reclaim", "A", "--yes", "--json", timeout=120)
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
        out = json.loads(res.stdout)
        planned = plan_keys(out["plan"]["targets"])
        assert not {k[0] for k in planned} & decoy_pids, out["plan"]["targets"]
        assert {t["role"] for t in out["plan"]["targets"]} <= {"launcher", "server"}
        assert all(p.poll() is None for p in decoys), "a decoy was killed"
        gone = [pid for pid in decoy_pids if read_proc(pid) is None]
        assert not gone, f"decoys killed: {gone} of {sorted(decoy_pids)}; plan {out['plan']['targets']}"
        Procs.check(before, planned)
        audit.need(mark, "reclaim", "done", planned)
    finally:
        _stop(decoys)
        subprocess.run(["tmux", "-L", sock, "kill-server"], timeout=30, capture_output=True)


def _server_procs(d: Path, side: str) -> list:
    """The sim's own record of the side's server processes (launcher and shipping binary)."""
    from sim import rig as sim
    out = []
    for r in sim.running(d):
        p = read_proc(r.pid)
        if p is not None and r.role in ("launcher", "server", "shipping"):
            out.append(p)
    return out


# ---- class 1: a chain never holds a sibling subtree of a shared ancestor -------------------------------

@pytest.mark.scenario("hand-started-evaluator-in-tmux")
def test_recover_of_a_hand_started_evaluator_leaves_the_tmux_server_and_its_other_jobs(rig, tmp_path) -> None:
    d, rig_yaml = rig
    n, tm = sides(d)["A"]["rpc_port"], sides(d)["A"]["tm_port"]
    rec = Records({"A": checkpoint_path(d, "A"), "B": checkpoint_path(d, "B")})
    sock = f"carla-faults-{uuid.uuid4().hex[:8]}"
    argv, ready = _hand_evaluator(tmp_path, n, tm)
    # The tmux server keeps the argv of the command that started it: it "has the tokens" of the side.
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "hand", "-x", "100", "-y", "20", *argv],
                   check=True, timeout=30)
    try:
        subprocess.run(["tmux", "-L", sock, "new-window", "-d", "-t", "hand", "sleep 3600"], check=True, timeout=30)
        assert wait_until(ready.exists, 30), "the hand-started evaluator never connected"
        count("hostile 1")
        _stale_log(rig_yaml, "A")
        wait_stale(rig_yaml, "A")
        res = cli(rig_yaml, "recover", "A", "--dry-run", "--json", timeout=120)
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
        plan = json.loads(res.stdout)
        assert plan["refused"] is None, plan["refused"]
        roles = [(t["role"], os.path.basename(t["cmdline"][0])) for t in plan["kill_plan"]]
        assert [r for r, _ in roles] == ["evaluator"], roles          # not the tmux server, not its windows
        assert plan["kill_plan"][0]["cmdline"][1].endswith("leaderboard_evaluator.py")
        planned = plan_keys(plan["kill_plan"])

        before = Procs.snapshot()
        tmux_server = [p for p in before.procs.values() if p.cmdline and os.path.basename(p.cmdline[0]) == "tmux"
                       and sock in p.cmdline]
        sleeper = [p for p in before.procs.values() if p.cmdline == ("sleep", "3600")]
        assert tmux_server and sleeper
        res = cli(rig_yaml, "recover", "A", "--yes", "--json", timeout=180)
        assert res.returncode in (0, 3), res.stdout[-1500:] + res.stderr[-1500:]
        out = json.loads(res.stdout)
        assert plan_keys(out["kill_plan"]) == planned
        assert not any(alive(k) for k in planned), "the hand-started evaluator survived"
        for p in tmux_server + sleeper:
            assert alive(key(p.pid, p.create_time)), f"{p.cmd_text(120)} was touched"
        Procs.check(before, planned)
        rec.check()
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], timeout=30, capture_output=True)


# ---- class 1: the re-check before a signal confirms the program ---------------------------------------

EXECS = """\
import os, sys, time
flag = sys.argv[1]
while not os.path.exists(flag):
    time.sleep(0.02)
os.execvp("sleep", ["sleep", "3600"])
"""


@pytest.mark.scenario("exec-since-the-plan")
def test_a_target_that_execd_into_another_program_is_not_signalled(tmp_path) -> None:
    import asyncio

    from ops.actions.audit import Audit as OpsAudit
    from ops.actions.guard import Confirmation, Guard, Op, Target, make_plan
    from ops.platform.local import LocalHost

    flag = tmp_path / "exec-now"
    proc = _spawn([sys.executable, "-c", EXECS, str(flag), "--port", "1", "--traffic-manager-port", "2"])
    try:
        first = wait_until(lambda: (p := read_proc(proc.pid)) and p.cmdline and p.cmdline[0] == sys.executable and p, 20)
        assert first
        target = Target.of("local", first, "evaluator")
        plan = make_plan(Op.STOP_CHAIN, "A", "local", [target],
                         {"heartbeat": "STALE", "evaluator": "ALIVE", "server": "ALIVE"}, action="test")
        assert plan.allowed
        flag.touch()
        assert wait_until(lambda: (p := read_proc(proc.pid)) and p.cmdline == ("sleep", "3600"), 20)
        count("hostile 1")
        host = LocalHost()
        out = asyncio.run(Guard({"local": host}, OpsAudit(tmp_path / "state"), grace_s=1.0).execute(
            plan, Confirmation(True, "--yes")))
        assert [t.outcome for t in out.targets] == ["skipped-changed"], out.targets
        assert not out.ok and "exec" in out.targets[0].detail
        assert proc.poll() is None, "the process that exec'd into another program was signalled"
        line = OpsAudit(tmp_path / "state").read()[-1]
        assert line["outcome"] == "incomplete"
    finally:
        _stop([proc])


# ---- class 2: a server with any client is busy ---------------------------------------------------------

@pytest.mark.scenario("client-without-tm-port")
def test_a_server_with_a_client_outside_the_chain_is_busy(rig, tmp_path) -> None:
    d, rig_yaml = rig
    n = sides(d)["A"]["rpc_port"]
    # Started by hand without --traffic-manager-port: not in the chain, yet it drives the server.
    argv, ready = _hand_evaluator(tmp_path, n, None)
    hand = _spawn(argv)
    try:
        assert wait_until(ready.exists, 30)
        count("hostile 1")
        st = _status(rig_yaml)
        assert st["A"]["evaluator"]["state"] == "DEAD" and st["A"]["server"]["state"] == "ALIVE"
        assert st["A"]["idle"] is False and st["A"]["busy"] is True and st["A"]["clients"]["count"] == 1
        assert st["B"]["idle"] is True and st["B"]["busy"] is False
        before = Procs.snapshot()
        res = cli(rig_yaml, "launch", "A", "--yes", "--json", timeout=120)
        assert res.returncode == 3, res.stdout[-1500:] + res.stderr[-1500:]
        assert "client" in json.loads(res.stdout)["refused"]
        assert not _harness_pids(rig_yaml), "a second evaluator's harness was started on a busy server"
        res = cli(rig_yaml, "reclaim", "A", "--yes", "--json", timeout=120)
        assert res.returncode == 3, res.stdout[-1500:] + res.stderr[-1500:]
        assert hand.poll() is None
        Procs.check(before, [])
    finally:
        _stop([hand])


# ---- class 6: two launches at once, a harness from a copy of the rig file ------------------------------

@pytest.mark.scenario("two-launches-at-once")
def test_two_simultaneous_launches_of_one_side_run_exactly_one(rig) -> None:
    d, rig_yaml = rig
    cmd = [sys.executable, "-m", "console", "-c", str(rig_yaml), "launch", "B", "--yes", "--json"]
    from tests.support.evalops_sim import REPO
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    rcs = sorted(p.returncode for p in procs)
    count("hostile 1")
    assert rcs == [0, 3], [(p.returncode, o[0][-600:], o[1][-600:]) for p, o in zip(procs, outs)]
    assert len(_harness_pids(rig_yaml)) == 1
    st = wait_until(lambda: (s := harness_state(d, "B")) and s["status"] == "running" and s, 30)
    assert st, harness_state(d, "B")
    n, tm = sides(d)["B"]["rpc_port"], sides(d)["B"]["tm_port"]
    from tests.faults.harness_kit import evaluators_of
    # One run: one innermost evaluator. conda run's tree is wrapper → shell → evaluator, and the shell
    # carries no tokens: "innermost" is no token-carrying process below it, at any depth.
    evs = evaluators_of(n, tm)
    pids = {p.pid for p in evs}

    def has_descendant_in_set(pid: int) -> bool:
        try:
            return any(c.pid in pids for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            return False
    inner = [p for p in evs if not has_descendant_in_set(p.pid)]
    assert len(inner) == 1, [p.cmd_text(120) for p in inner]


@pytest.mark.scenario("harness-from-a-copy-of-the-rig")
def test_a_harness_started_from_a_copy_of_the_rig_file_is_in_the_kill_plan(rig, tmp_path) -> None:
    d, rig_yaml = rig
    copy = tmp_path / "elsewhere" / "rig.yaml"      # the same rig (same name), another path
    copy.parent.mkdir()
    shutil.copy(rig_yaml, copy)
    rec = Records({"A": checkpoint_path(d, "A")})
    res = cli(copy, "launch", "A", "--yes", "--json", timeout=120)
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    copy_harness = json.loads(res.stdout)["harness_pid"]
    try:
        count("hostile 1")
        assert rec.watch(lambda: (rec.high.get("A") or 0) >= 1, 60)
        inject(d, "A", "hang")
        wait_stale(rig_yaml, "A", timeout=30)
        res = cli(rig_yaml, "recover", "A", "--dry-run", "--json", timeout=120)
        plan = json.loads(res.stdout)
        assert plan["refused"] is None, plan["refused"]
        assert plan["kill_plan"][0]["role"] == "harness" and plan["kill_plan"][0]["pid"] == copy_harness
        assert str(copy) in plan["kill_plan"][0]["cmdline"]
        # Between attempts (no evaluator under it) the copy's harness is still the side's.
        st = _status(rig_yaml)["A"]
        assert copy_harness in [m["pid"] for m in st["evaluator"]["chain"]]
        rec.check()
    finally:
        p = read_proc(copy_harness)
        if p is not None:
            os.kill(copy_harness, signal.SIGTERM)
            wait_until(lambda: not alive(key(p.pid, p.create_time)), 20)
