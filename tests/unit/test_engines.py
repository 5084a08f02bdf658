"""The engine seam without a cluster: SLURM's output parsed, job states as tri-state, the `slurm:` config
block, the guard's job targets (re-verification and the op/target pairing), array task → side mapping."""
from __future__ import annotations

import asyncio
import textwrap

import pytest

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, JobTarget, Op, Target, make_plan
from ops.actions.guard_jobs import changed
from ops.config import ConfigError, parse_config
from ops.engines.slurm import SlurmEngine
from ops.parse.slurm import JobInfo, parse_scontrol, parse_squeue, tri_state
from ops.tristate import State

SQUEUE = """\
1_[2-3%2]|1|1|2-3%2|cc.r|PENDING|2026-12-01T22:56:10||JobArrayTaskLimit|0:00
1_0|2|1|0|cc.r|CANCELLED|2026-12-01T22:56:10|vm|None|0:01
1_1|3|1|1|cc.r|RUNNING|2026-12-01T22:56:10|vm|None|0:02
7|7|7|N/A|cc.r.A|RUNNING|2026-12-01T22:59:00|vm|None|0:05
"""
SCONTROL = ("JobId=2 ArrayJobId=1 ArrayTaskId=0 JobName=cc.r UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
            "Requeue=1 Restarts=1 BatchFlag=1 ExitCode=0:9 SubmitTime=2026-12-01T22:56:10 NodeList=vm BatchHost=vm\n")


def test_squeue_rows_parse_with_array_tasks_and_a_pending_remainder():
    rows = parse_squeue(SQUEUE)
    assert not isinstance(rows, str)
    assert [r.display_id for r in rows] == ["1_2-3%2", "1_0", "1_1", "7"]
    assert rows[0].state == "PENDING" and rows[0].reason == "JobArrayTaskLimit" and rows[0].node is None
    assert rows[3].array_task_id is None and rows[3].name == "cc.r.A"
    assert [tri_state(r.state) for r in rows] == [State.ALIVE, State.DEAD, State.ALIVE, State.ALIVE]


def test_squeue_row_with_missing_fields_is_an_error_not_a_guess():
    assert "fields" in parse_squeue("7|7|cc.r.A|RUNNING\n")


def test_scontrol_record_parses_restarts_and_exit():
    [j] = parse_scontrol(SCONTROL)
    assert (j.job_id, j.display_id, j.state, j.restarts, j.exit_code, j.node) == ("2", "1_0", "FAILED", 1, "0:9", "vm")
    assert "JobId" in parse_scontrol("JobState=RUNNING\n")


def test_unknown_scheduler_words_are_unknown():
    assert tri_state("SOMETHING_NEW") is State.UNKNOWN and tri_state("") is State.UNKNOWN


def test_a_requeued_or_renamed_job_is_not_the_planned_target():
    t = JobTarget("c", "2", "cc.r", "2026-12-01T22:56:10", state="RUNNING")
    alive = frozenset({"RUNNING"})
    info = JobInfo("2", None, None, "cc.r", "RUNNING", "2026-12-01T22:56:10", "vm")
    assert changed(t, info, alive) is None
    assert "submit time" in changed(t, JobInfo("2", None, None, "cc.r", "RUNNING", "2026-12-01T23:00:00", "vm"), alive)
    assert "name" in changed(t, JobInfo("2", None, None, "other", "RUNNING", "2026-12-01T22:56:10", "vm"), alive)
    assert "now COMPLETED" in changed(t, JobInfo("2", None, None, "cc.r", "COMPLETED", "2026-12-01T22:56:10",
                                                 "vm"), alive)
    assert "cannot re-read" in changed(t, "scontrol: timeout after 20 s", alive)


def test_job_ops_take_job_targets_and_kill_ops_take_processes():
    job = JobTarget("c", "2", "cc.r", "t")
    proc = Target("local", 123, 1.0, "evaluator", ("python",))
    assert make_plan(Op.STOP_JOB, "A", "local", [], {"job": "ALIVE"}, jobs=[job]).allowed
    assert "no job" in make_plan(Op.STOP_JOB, "A", "local", [], {"job": "ALIVE"}).refused
    assert "acts on jobs" in make_plan(Op.STOP_JOB, "A", "local", [proc], {"job": "ALIVE"}, jobs=[job]).refused
    assert "signals processes" in make_plan(Op.STOP_CHAIN, "A", "local", [proc], {
        "heartbeat": "STALE", "evaluator": "ALIVE", "server": "ALIVE"}, jobs=[job]).refused
    assert "UNKNOWN" in make_plan(Op.STOP_JOB, "A", "local", [], {"job": "UNKNOWN"}, jobs=[job]).refused
    assert "heartbeat" in make_plan(Op.RECOVER_JOB, "A", "local", [], {"job": "ALIVE", "heartbeat": "FRESH"},
                                    jobs=[job]).refused
    assert "budget" in make_plan(Op.REQUEUE_JOB, "A", "local", [], {"job": "LOST", "budget": "SPENT", "run": "CUT"},
                                 jobs=[job]).refused
    assert "run" in make_plan(Op.REQUEUE_JOB, "A", "local", [], {"job": "LOST", "budget": "LEFT", "run": "ENDED"},
                              jobs=[job]).refused


class FakeCluster:
    """A JobControl whose job changes between the plan and the act (the guard must notice)."""
    def __init__(self, info):
        self.info = info
        self.cancelled = []

    async def lookup(self, job_id):
        return self.info

    async def cancel(self, job_id):
        self.cancelled.append(job_id)
        return True, "scancel ok"

    async def requeue(self, job_id):
        return True, "ok"


def test_guard_does_not_cancel_a_job_that_was_requeued_since_the_plan(tmp_path):
    t = JobTarget("c", "2", "cc.r", "2026-12-01T22:56:10", state="RUNNING")
    ctl = FakeCluster(JobInfo("2", None, None, "cc.r", "RUNNING", "2026-12-01T23:10:00", "vm"))
    guard = Guard({}, Audit(str(tmp_path)), jobs={"c": ctl})
    plan = make_plan(Op.STOP_JOB, "A", "local", [], {"job": "ALIVE"}, jobs=[t])
    out = asyncio.run(guard.execute(plan, Confirmation(True, "test")))
    assert not out.ok and ctl.cancelled == []
    assert "skipped-changed" in out.detail and "submit time" in out.detail
    assert (tmp_path / "audit.jsonl").read_text().count('"stop-job"') == 2   # started + incomplete


RIG = textwrap.dedent("""\
    version: 1
    name: r
    state_dir: state
    engine: slurm
    slurm: {conf: /etc/x/slurm.conf, array_throttle: 4, requeue_budget: 2, gres: null}
    hosts: {local: {type: local}}
    sides:
      A:
        server: {host: local, command: [CarlaUE4.sh], rpc_port: 2000}
        evaluator: {host: local, conda_env: e, cwd: /w, script: s.py, routes: r.xml, checkpoint: c.json,
                    log: l.log, tm_port: 8000}
    """)


def test_slurm_block_loads_with_defaults():
    rig = parse_config(RIG, "/tmp/rig.yaml")
    assert rig.engine == "slurm" and rig.slurm is not None
    assert (rig.slurm.conf, rig.slurm.array_throttle, rig.slurm.requeue_budget, rig.slurm.gres, rig.slurm.host) == (
        "/etc/x/slurm.conf", 4, 2, None, "local")
    assert parse_config(RIG.replace("engine: slurm\n", ""), "/tmp/rig.yaml").engine == "process"


@pytest.mark.parametrize("old,new,key", [
    ("engine: slurm", "engine: pbs", "engine"),
    ("array_throttle: 4", "array_throttle: -1", "slurm.array_throttle"),
    ("gres: null", "gres: null, host: nowhere", "slurm.host"),
    ("gres: null", "gres: null, partitions: x", "slurm.partitions"),
    ("name: r", "name: r.x", "name"),
    ("gres: null", "gres: null, sbatch_args: [--wrap, 'sleep 1']", "slurm.sbatch_args[0]"),
])
def test_slurm_block_errors_name_the_key(old, new, key):
    with pytest.raises(ConfigError) as e:
        parse_config(RIG.replace(old, new), "/tmp/rig.yaml")
    assert key in str(e.value)


def test_array_tasks_map_to_sides_through_the_array_record(tmp_path):
    rig = parse_config(RIG.replace("state_dir: state", f"state_dir: {tmp_path}"), "/tmp/rig.yaml")
    eng = SlurmEngine(rig, {"local": object()})
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "array-1.json").write_text('{"sides": ["A", "B", "C", "D"]}')
    rows = parse_squeue(SQUEUE)
    assert [eng.side_of(r) for r in rows] == [["C", "D"], ["A"], ["B"], ["A"]]


def test_sim_side_names_are_letters_then_numbered():
    from sim.slurm_rig import side_names
    assert side_names(3) == ["A", "B", "C"]
    assert side_names(26)[-1] == "Z"
    assert side_names(32)[:2] == ["s01", "s02"] and len(set(side_names(64))) == 64
