"""SLURM's answers, parsed: `squeue` rows and `scontrol show job -o` records → JobInfo, and a job's state
as the console's tri-state (design.md §4 "SLURM").

A job is identified by (cluster, job id, name, submit time): a requeue keeps the id but moves the submit
time, so a plan made before a requeue does not act on the job after it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.tristate import State

# squeue -o: every field a side needs, '|'-separated (job names are validated words: no '|').
SQUEUE_FIELDS = ("%i", "%A", "%F", "%K", "%j", "%T", "%V", "%N", "%r", "%M")
SQUEUE_FORMAT = "|".join(SQUEUE_FIELDS)

# Job states (squeue/scontrol long names). A job SLURM still runs or will run is ALIVE; a job that ended
# is DEAD (positive evidence: SLURM says so). Anything else is not ours to guess.
ALIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                          "RESV_DEL_HOLD"})
DEAD_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
# Ended without finishing the side's work, for a reason outside the run: worth a requeue within budget.
LOST_STATES = frozenset({"NODE_FAIL", "TIMEOUT", "PREEMPTED", "BOOT_FAIL", "FAILED", "OUT_OF_MEMORY"})


def job_state_word(raw: str) -> str:
    """`CANCELLED by 0` → CANCELLED; `RUNNING` → RUNNING."""
    return raw.split()[0].rstrip("+") if raw.strip() else ""


def tri_state(word: str) -> State:
    if word in ALIVE_STATES:
        return State.ALIVE
    if word in DEAD_STATES:
        return State.DEAD
    return State.UNKNOWN


@dataclass(frozen=True)
class JobInfo:
    job_id: str              # the job's own id (unique: for an array task, not `A_i`)
    array_job_id: str | None
    array_task_id: str | None
    name: str
    state: str               # SLURM's word
    submit_time: str         # as SLURM prints it (seconds resolution), the identity's third part
    node: str | None
    reason: str = ""
    restarts: int | None = None   # scontrol's Restarts (requeues so far); squeue does not print it
    exit_code: str | None = None

    @property
    def display_id(self) -> str:
        return f"{self.array_job_id}_{self.array_task_id}" if self.array_task_id else self.job_id

    @property
    def verdict(self) -> State:
        return tri_state(self.state)

    def to_json(self) -> dict:
        return {"id": self.job_id, "display_id": self.display_id, "name": self.name, "state": self.state,
                "submit_time": self.submit_time, "node": self.node, "reason": self.reason,
                "restarts": self.restarts, "array": [self.array_job_id, self.array_task_id]
                if self.array_task_id else None}


def _none(v: str) -> str | None:
    v = v.strip()
    return None if v in ("", "N/A", "(null)", "n/a") else v


def parse_squeue(text: str) -> list[JobInfo] | str:
    """Rows of `squeue -h -o SQUEUE_FORMAT`; an error string when a row does not have the fields.

    A pending array's unstarted tasks come as one row (`%i` = `12_[3-7%2]`, %K = `3-7%2`): kept, with
    that range as its task id, so that the console can say "5 tasks pending".
    """
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SQUEUE_FIELDS):
            return f"squeue line {n}: {len(parts)} fields, expected {len(SQUEUE_FIELDS)}: {line[:200]!r}"
        disp, jid, arr, task, name, state, submit, node, reason, _elapsed = (p.strip() for p in parts)
        task_id = _none(task)
        out.append(JobInfo(job_id=jid, array_job_id=_none(arr) if task_id else None, array_task_id=task_id,
                           name=name, state=job_state_word(state), submit_time=submit, node=_none(node),
                           reason=_none(reason) or ""))
    return out


def parse_scontrol(text: str) -> list[JobInfo] | str:
    """`scontrol show job -o [ID]`: one record a line, `Key=value` tokens (values without spaces, except
    the ones SLURM ends the line with, which we do not read)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        kv: dict[str, str] = {}
        for tok in line.split():
            k, sep, v = tok.partition("=")
            if sep and k not in kv:
                kv[k] = v
        if "JobId" not in kv or "JobState" not in kv:
            return f"scontrol line {n}: no JobId/JobState: {line[:200]!r}"
        restarts = kv.get("Restarts")
        task = _none(kv.get("ArrayTaskId", ""))
        out.append(JobInfo(job_id=kv["JobId"], array_job_id=_none(kv.get("ArrayJobId", "")) if task else None,
                           array_task_id=task, name=kv.get("JobName", ""),
                           state=job_state_word(kv["JobState"]), submit_time=kv.get("SubmitTime", ""),
                           node=_none(kv.get("BatchHost", "")) or _none(kv.get("NodeList", "")),
                           reason=_none(kv.get("Reason", "")) or "",
                           restarts=int(restarts) if restarts and restarts.isdigit() else None,
                           exit_code=_none(kv.get("ExitCode", ""))))
    return out
