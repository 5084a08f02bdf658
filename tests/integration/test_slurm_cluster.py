"""The one-node SLURM cluster of tests/support/slurm.py: up in seconds, a job really runs (with a GPU from
the allocation), and stop() leaves nothing in squeue and no daemon behind."""
from __future__ import annotations

import os

import pytest

from tests.support.slurm import Cluster, available, wait_for

pytestmark = pytest.mark.slurm


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_one_node_cluster_runs_a_job_and_stops_clean(tmp_path):
    why = available()
    if why:
        pytest.fail(why, pytrace=False)
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\necho \"gpu=${SLURM_JOB_GPUS:-none} node=$SLURMD_NODENAME\"\nsleep 300\n")
    cluster = Cluster.start(tmp_path / "cluster")
    pids = [p.pid for p in cluster.procs.values()]
    try:
        gres = ["--gres=gpu:1"] if cluster.gpus else []
        jid = cluster.run("sbatch", "--parsable", "-J", "t.one", "-o", str(tmp_path / "out.txt"), *gres,
                          str(job)).stdout.strip()
        wait_for(lambda: cluster.job_field(jid, "JobState") == "RUNNING", 60, f"job {jid} RUNNING")
        wait_for(lambda: "node=" in (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists()
                 else False, 60, "the job's first line")
        out = (tmp_path / "out.txt").read_text()
        assert f"node={cluster.node}" in out
        if cluster.gpus:
            assert "gpu=0" in out       # the allocation's GPU, as SLURM_JOB_GPUS
        assert cluster.job_ids() == [jid]
        assert cluster.steps_busy()
    finally:
        cluster.stop()
    assert not cluster.steps_busy()
    assert not any(_alive(p) for p in pids), "a daemon of the test cluster is still running"
    assert os.environ.get("SLURM_CONF") != str(cluster.conf)   # clients get it per call, not globally
