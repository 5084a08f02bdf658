"""The guard's acts on scheduler jobs (Op.STOP_JOB, Op.RECOVER_JOB, Op.REQUEUE_JOB): the job twin of
signalling a process by (pid, create time).

Each JobTarget is re-read exactly (`scontrol show job ID`) right before the act and must still be the same
job: same id, same name, same submit time (a requeue moves the submit time, so a plan made before it
does not act after it) and still in a state the operation allows. Then the act (scancel / requeue), then
the verification that it took effect. An unreadable job refuses (UNKNOWN never authorises).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ops.parse.slurm import ALIVE_STATES, LOST_STATES, JobInfo, tri_state
from ops.tristate import State


@dataclass(frozen=True)
class JobTarget:
    """A side run by a scheduler: the job, identified by (cluster, job id, name, submit time). A requeue
    keeps the id and moves the submit time, so the same id after a requeue is another target."""
    cluster: str
    job_id: str              # what scancel/scontrol get: `123`, or `120_3` for an array task
    name: str
    submit_time: str         # as the scheduler prints it
    role: str = "job"
    state: str = ""          # the state the plan saw

    def to_json(self) -> dict:
        return {"cluster": self.cluster, "job_id": self.job_id, "name": self.name,
                "submit_time": self.submit_time, "role": self.role, "state": self.state}


class JobControl(Protocol):
    async def lookup(self, job_id: str) -> JobInfo | str: ...

    async def cancel(self, job_id: str) -> tuple[bool, str]: ...

    async def requeue(self, job_id: str) -> tuple[bool, str]: ...


SETTLE_S = 90.0     # a cancel takes KillWait (30 s by default) to end a job that ignores SIGTERM


def changed(target: JobTarget, info: JobInfo | str, allowed: frozenset[str]) -> str | None:
    """Why this job is not the planned one any more (None: same job, in an allowed state)."""
    if isinstance(info, str):
        return f"job {target.job_id}: cannot re-read ({info})"
    if info.name != target.name:
        return f"job {target.job_id}: name is {info.name!r}, planned {target.name!r}"
    if target.submit_time and info.submit_time != target.submit_time:
        return f"job {target.job_id}: submit time {info.submit_time}, planned {target.submit_time} (requeued?)"
    if info.state not in allowed:
        return f"job {target.job_id}: now {info.state}"
    return None


async def _settle(ctl: JobControl, job_id: str, done: Callable[[JobInfo], bool], within: float) -> JobInfo | str:
    deadline = time.monotonic() + within
    while True:
        info = await ctl.lookup(job_id)
        if isinstance(info, JobInfo) and done(info):
            return info
        if time.monotonic() >= deadline:
            return info
        await asyncio.sleep(0.25)


async def act_on_jobs(op_value: str, targets: Sequence[JobTarget], jobs: Mapping[str, JobControl],
                      settle_s: float = SETTLE_S) -> tuple[bool, list[tuple[JobTarget, str, str]]]:
    """Re-verify, act, verify, for every target. Returns (all ok, [(target, outcome, detail)])."""
    results: list[tuple[JobTarget, str, str]] = []
    for t in targets:
        ctl = jobs.get(t.cluster)
        if ctl is None:
            results.append((t, "failed", f"no control for cluster {t.cluster}"))
            continue
        allowed = LOST_STATES if op_value == "requeue-job" else ALIVE_STATES
        why = changed(t, await ctl.lookup(t.job_id), allowed)
        if why:
            results.append((t, "skipped-changed", why))
            continue
        if op_value == "requeue-job":
            ok, detail = await ctl.requeue(t.job_id)
            if not ok:
                results.append((t, "failed", detail))
                continue
            after = await _settle(ctl, t.job_id, lambda i: tri_state(i.state) is State.ALIVE
                                  and i.submit_time != t.submit_time, settle_s)
            if isinstance(after, JobInfo) and tri_state(after.state) is State.ALIVE:
                results.append((t, "requeued", f"{detail}; now {after.state}, submitted {after.submit_time}, "
                                               f"restarts {after.restarts}"))
            else:
                results.append((t, "failed", f"{detail}; not queued again: {after if isinstance(after, str) else after.state}"))
            continue
        ok, detail = await ctl.cancel(t.job_id)
        if not ok:
            results.append((t, "failed", detail))
            continue
        after = await _settle(ctl, t.job_id, lambda i: tri_state(i.state) is State.DEAD, settle_s)
        if isinstance(after, JobInfo) and tri_state(after.state) is State.DEAD:
            results.append((t, "cancelled", f"{detail}; now {after.state}"))
        else:
            results.append((t, "alive", f"{detail}; still {after if isinstance(after, str) else after.state} "
                                        f"after {settle_s:.0f} s"))
    return all(o in ("cancelled", "requeued") for _, o, _ in results) and bool(results), results
