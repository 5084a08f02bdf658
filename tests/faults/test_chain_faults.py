"""The kill-plan traps, on a sim rig whose evaluators run under the fake conda with no harness (as a
hand-started `conda run … leaderboard_evaluator.py` does): side A for self-match, side B for the
wrapper-only trap. Each scenario acts on its own side only."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ops.platform.procs import read_proc
from sim import rig as sim
from tests.faults.common import dry_plan, inject, killed_by_signal, wait_stale
from tests.faults.harness_kit import Audit, Procs, Records, alive, checkpoint_path, evaluators_of, key, plan_keys
from tests.support.evalops_sim import REPO, cli, harness_state, sides, wait_until

# The console's own process, with the side's exact marker tokens in its own argv, runs the CLI.
SELF = ("import json, os, sys\n"
        "from console.cli.main import main\n"
        "print(json.dumps({'self': os.getpid(), 'parent': os.getppid()}), file=sys.stderr, flush=True)\n"
        "sys.exit(main(['-c', sys.argv[1], 'recover', sys.argv[2], *sys.argv[3].split()]))\n")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    d = tmp_path_factory.mktemp("faultschain") / "sim"
    rig_yaml = sim.up(d, start_evaluators=True, routes=60, route_s=1.0, tick_s=0.2, stall_s=2.0)
    try:
        yield d, rig_yaml
    finally:
        sim.down(d)


def _marked_shell(rig_yaml, side: str, mode: str, n: int, tm: int) -> tuple[subprocess.CompletedProcess, dict]:
    """bash (its argv: the side's tokens) → python -c SELF (its argv: the same tokens) → recover."""
    res = subprocess.run(
        ["bash", "-c", '"$0" -c "$1" "$2" "$3" "$4" --port "$5" --traffic-manager-port "$6"; exit $?',
         sys.executable, SELF, str(rig_yaml), side, mode, str(n), str(tm), "--port", str(n),
         "--traffic-manager-port", str(tm)],
        cwd=REPO, capture_output=True, text=True, timeout=150)
    ids = json.loads(res.stderr.splitlines()[0])
    return res, ids


@pytest.mark.scenario("self-match")
def test_own_process_and_marked_shell_never_in_a_plan(rig) -> None:
    d, rig_yaml = rig
    n, tm = sides(d)["A"]["rpc_port"], sides(d)["A"]["tm_port"]
    rec = Records({"A": checkpoint_path(d, "A")})
    inject(d, "A", "hang")
    wait_stale(rig_yaml, "A")

    dry, ids = _marked_shell(rig_yaml, "A", "--dry-run --json", n, tm)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    pids = [t["pid"] for t in plan["kill_plan"]]
    assert ids["self"] not in pids and ids["parent"] not in pids
    assert [t["role"] for t in plan["kill_plan"]] == ["wrapper", "shell", "evaluator"]   # conda run's tree
    planned = plan_keys(plan["kill_plan"])
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()

    run, ids = _marked_shell(rig_yaml, "A", "--yes --json", n, tm)
    assert run.returncode == 0 and not killed_by_signal(run.returncode), run.stdout + run.stderr
    out = json.loads(run.stdout)
    got = plan_keys(out["kill_plan"])
    assert got == planned and ids["self"] not in {k[0] for k in got} and ids["parent"] not in {k[0] for k in got}
    Procs.check(before, planned)
    audit.need(mark, "stop-chain", "done", planned)
    rec.check()


@pytest.mark.scenario("wrapper-only-kill-trap")
def test_plan_holds_the_evaluator_under_the_conda_wrapper(rig) -> None:
    d, rig_yaml = rig
    n, tm = sides(d)["B"]["rpc_port"], sides(d)["B"]["tm_port"]
    rec = Records({"B": checkpoint_path(d, "B")})
    assert rec.watch(lambda: (rec.high.get("B") or 0) >= 1, 20)
    # The trap as it was: `pgrep -f leaderboard_evaluator | head -1` — the lowest pid with those words is
    # the conda wrapper, whose cmdline holds the evaluator's whole command line.
    words = sorted((p for p in evaluators_of(n, tm)), key=lambda p: p.pid)
    # conda run's real tree: its python (the wrapper) → `bash /tmp/tmpXXXX` → the evaluator.
    shell = read_proc(words[1].ppid) if len(words) == 2 else None
    assert len(words) == 2 and "run" in words[0].cmdline[:4] and shell is not None and shell.ppid == words[0].pid
    assert any(a.endswith("leaderboard_evaluator.py") for a in words[0].cmdline)
    inject(d, "B", "hang")
    wait_stale(rig_yaml, "B")

    plan = dry_plan(rig_yaml, "B")
    roles = [t["role"] for t in plan["kill_plan"]]
    assert roles == ["wrapper", "shell", "evaluator"], roles   # not only the wrapper: conda's shell and the evaluator too
    assert plan_keys(plan["kill_plan"]) == [key(p.pid, p.create_time) for p in (words[0], shell, words[1])]
    planned = plan_keys(plan["kill_plan"])
    audit = Audit(d / "state")
    mark = audit.mark()
    before = Procs.snapshot()

    res = cli(rig_yaml, "recover", "B", "--yes", "--json", timeout=150)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not any(alive(k) for k in planned), "a process of the old chain survived"
    Procs.check(before, planned)
    audit.need(mark, "stop-chain", "done", planned)
    # After the recovery the only evaluator of side B is the new harness's: no second one on the server.
    st = wait_until(lambda: (s := harness_state(d, "B")) and s["status"] == "running" and s, 15)
    new = evaluators_of(n, tm)
    assert new and all(key(p.pid, p.create_time) not in planned for p in new)
    for p in new:
        anc, q = set(), read_proc(p.ppid)
        while q is not None and q.pid > 1 and len(anc) < 32:
            anc.add(q.pid)
            q = read_proc(q.ppid)
        assert st["pid"] in anc, f"evaluator {p.pid} is not under the new harness {st['pid']}"
    def ancestors(q):
        out, a = set(), read_proc(q.ppid)
        while a is not None and a.pid > 1 and len(out) < 32:
            out.add(a.pid)
            a = read_proc(a.ppid)
        return out
    inner = [p for p in new if not any(p.pid in ancestors(c) for c in new)]   # conda's shell sits between
    assert len(inner) == 1, [p.cmd_text(120) for p in new]
    rec.check()
