"""SLURM as the engine: a side is a batch job (or one task of a job array) on the cluster SLURM_CONF names.

    start     sbatch of ops/scripts/slurm_side.sh (a file, never stdin) with the side as an argument:
              on the allocated node the job runs `carla-console -c RIG job-run SIDE`
              (ops/engines/slurm_job.py), which takes free ports there, the GPU of the allocation, starts
              the side's server and runs the side's harness — the same supervisor as a local run.
              Several sides at once: one job array, `--array=0-(n-1)%k` (k = slurm.array_throttle).
    observe   one `squeue` for every job of the rig per beat → each side's Run: the job's state as
              tri-state with the raw row as evidence.
    stop      the guard's Op.STOP_JOB on JobTarget(cluster, job id, name, submit time): re-verified by
              `scontrol show job ID` right before `scancel ID`, then verified ended.
    requeue   a job lost to a node failure, the time limit or a kill from outside (FAILED/NODE_FAIL/
              TIMEOUT/...) while its side has routes left: Op.REQUEUE_JOB within slurm.requeue_budget
              (SLURM's own Restarts counter is the evidence): `scontrol requeue ID`; SLURM starts it again after its
              requeue delay (cred_expire + 1 s), which is never cut short.

Names: a side's own job is `cc.RIG.SIDE`; an array is `cc.RIG` with its task → side map in
STATE/slurm/array-ID.json. A console started later finds every job by these names (rediscovery).
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, JobTarget, Op, Outcome, Plan, make_plan
from ops.engines.base import Run, Started
from ops.engines.overlay import job_record_path, read_job_record
from ops.model import RigConfig, SlurmConfig
from ops.parse.slurm import LOST_STATES, SQUEUE_FORMAT, JobInfo, parse_scontrol, parse_squeue, tri_state
from ops.platform.atomic import write_json
from ops.platform.base import SCRIPTS_DIR, Host
from ops.tristate import Evidence, State

KIND = "slurm"
JOB_SCRIPT = SCRIPTS_DIR / "slurm_side.sh"
QUERY_TIMEOUT_S = 20.0      # squeue/scontrol against a busy controller: seconds, bounded
SUBMIT_TIMEOUT_S = 30.0
SETTLE_S = 60.0             # how long a cancel/requeue is watched for its effect (KillWait is 30 s by default)


def job_name(rig: RigConfig, side: str | None) -> str:
    return f"cc.{rig.name}" + (f".{side}" if side else "")


def slurm_dir(rig: RigConfig) -> Path:
    return Path(rig.state_dir) / "slurm"


class SlurmClient:
    """The cluster's commands, run on the submit host (argv lists, bounded in time and bytes)."""

    def __init__(self, cfg: SlurmConfig, host: Host) -> None:
        self.cfg = cfg
        self.host = host

    @property
    def env(self) -> dict[str, str] | None:
        return {"SLURM_CONF": self.cfg.conf} if self.cfg.conf else None

    async def _run(self, argv: list[str], timeout: float = QUERY_TIMEOUT_S):
        return await self.host.run(argv, timeout=timeout, env=self.env)

    async def queue(self, names: Sequence[str]) -> tuple[list[JobInfo] | str, Evidence]:
        """Every job of these names SLURM still holds (all states: ended ones for MinJobAge)."""
        argv = ["squeue", "-h", "-t", "all", "-n", ",".join(names), "-o", SQUEUE_FORMAT]
        t0 = time.monotonic()
        res = await self._run(argv)
        took = (time.monotonic() - t0) * 1000
        if not res.ok:
            return res.why(), Evidence(" ".join(argv), False, error=res.why(), took_ms=took)
        rows = parse_squeue(res.stdout)
        if isinstance(rows, str):
            return rows, Evidence(" ".join(argv), False, error=rows, took_ms=took)
        return rows, Evidence("squeue", True, detail=f"{len(rows)} job rows", took_ms=took)

    async def lookup(self, job_id: str) -> JobInfo | str:
        """One job, exactly (`scontrol show job -o ID`); an error string when SLURM cannot say."""
        res = await self._run(["scontrol", "show", "job", "-o", job_id])
        if not res.ok:
            return f"scontrol show job {job_id}: {res.why()}"
        jobs = parse_scontrol(res.stdout)
        if isinstance(jobs, str):
            return jobs
        exact = [j for j in jobs if j.display_id == job_id or j.job_id == job_id]
        return exact[0] if len(exact) == 1 else f"scontrol show job {job_id}: {len(exact)} records"

    async def cancel(self, job_id: str) -> tuple[bool, str]:
        res = await self._run(["scancel", job_id])
        return res.ok, f"scancel {job_id}: " + ("ok" if res.ok else res.why())

    async def requeue(self, job_id: str) -> tuple[bool, str]:
        # The requeued job waits out SLURM's own delay (AuthInfo cred_expire + 1 s, 121 s by default) before
        # it starts again, and it must: the killed run's job credential stays revoked on the node until
        # then, and a job released earlier is killed at launch ("Job credential revoked", exit 1), which
        # spends the requeue budget for nothing.
        res = await self._run(["scontrol", "requeue", job_id])
        if not res.ok:
            return False, f"scontrol requeue {job_id}: {res.why()}"
        return True, f"scontrol requeue {job_id}: ok (it starts again after SLURM's requeue delay, cred_expire + 1 s)"

    async def submit(self, argv_tail: Sequence[str], *, name: str, out: str, array: str | None = None,
                     gres: str | None = None) -> tuple[str | None, str]:
        argv = ["sbatch", "--parsable", "--requeue", "-J", name, "-o", out]
        if array:
            argv += [f"--array={array}"]
        if self.cfg.partition:
            argv += ["-p", self.cfg.partition]
        if self.cfg.time_limit:
            argv += ["-t", self.cfg.time_limit]
        if gres:
            argv += [f"--gres={gres}"]
        argv += [*self.cfg.sbatch_args, str(JOB_SCRIPT), *argv_tail]
        res = await self._run(argv, SUBMIT_TIMEOUT_S)
        if not res.ok:
            return None, f"{' '.join(argv)}: {res.why()}"
        jid = res.stdout.strip().split(";")[0]
        return (jid, " ".join(argv)) if jid.isdigit() else (None, f"sbatch printed {res.stdout[:200]!r}")


@dataclass(frozen=True)
class Observation:
    runs: dict[str, Run]
    evidence: Evidence
    jobs: tuple[JobInfo, ...] = ()


class SlurmEngine:
    kind = KIND

    def __init__(self, rig: RigConfig, hosts: Mapping[str, Host]) -> None:
        if rig.slurm is None:
            raise ValueError(f"{rig.path}: engine slurm needs a `slurm:` block")
        self.rig = rig
        self.cfg: SlurmConfig = rig.slurm
        self.client = SlurmClient(self.cfg, hosts[self.cfg.host])
        # An array's side list, written once at its submission (a resubmission is another array id): read
        # once, not for each of its rows on every beat.
        self._arrays: dict[str, list[str]] = {}

    # ------------------------------------------------------------------------------------------- start

    def _job_argv(self, side_or_array: str) -> list[str]:
        return [self.cfg.python or sys.executable, self.rig.path, side_or_array]

    async def start(self, live: Any, sides: Sequence[str], conf: Confirmation,
                    guard: Guard | None = None) -> list[Started]:
        """Submit the sides (one job array when more than one), each through the guard (Op.SUBMIT_JOB:
        refused while the side already has a live job of this rig: two runs would fight for one log)."""
        if not conf.proceed:
            return [Started(s, False, "not confirmed", refused="not confirmed") for s in sides]
        guard = guard or Guard(live.hosts, Audit(self.rig.state_dir), jobs={self.cfg.cluster: self.client})
        obs = await self.observe(live)
        if obs.evidence.error:
            why = f"squeue UNKNOWN: {obs.evidence.error}"
            return [Started(s, False, why, refused=why) for s in sides]
        busy = {s: r for s, r in obs.runs.items() if r.state is not State.DEAD and s in sides}
        todo = [s for s in sides if s not in busy]
        out = [Started(s, False, f"side {s} already has job {r.word} {r.where or ''}".strip(),
                       refused=f"side {s} already has a live job ({r.job.job_id if r.job else '?'})")
               for s, r in busy.items()]
        if not todo:
            return out
        slurm_dir(self.rig).mkdir(parents=True, exist_ok=True)
        log_dir = slurm_dir(self.rig) / "logs"
        log_dir.mkdir(exist_ok=True)
        for s in todo:
            job_record_path(self.rig, s).unlink(missing_ok=True)   # the next job writes its own
        got: dict[str, Any] = {}

        async def act(_plan: Plan) -> tuple[bool, str]:
            if len(todo) == 1:
                jid, detail = await self.client.submit(
                    self._job_argv(todo[0]), name=job_name(self.rig, todo[0]),
                    out=str(log_dir / f"{todo[0]}-%j.out"), gres=self.cfg.gres)
            else:
                sides_file = slurm_dir(self.rig) / f"array-{int(time.time() * 1000)}.json"
                write_json(sides_file, {"sides": todo})
                k = self.cfg.array_throttle
                jid, detail = await self.client.submit(
                    self._job_argv(f"@{sides_file}"), name=job_name(self.rig, None),
                    out=str(log_dir / "array-%A_%a.out"), gres=self.cfg.gres,
                    array=f"0-{len(todo) - 1}" + (f"%{k}" if k else ""))
                if jid:
                    final = slurm_dir(self.rig) / f"array-{jid}.json"
                    write_json(final, {"sides": todo, "job_id": jid, "submitted": time.time()})
            got["jid"] = jid
            return jid is not None, detail

        plan = make_plan(Op.SUBMIT_JOB, ",".join(todo), self.cfg.host, (), {"job": "ABSENT"},
                         evidence=(obs.evidence.line(),),
                         action=f"sbatch {JOB_SCRIPT.name} for {', '.join(todo)}")
        outcome = await guard.execute(plan, conf, action=act)
        jid = got.get("jid")
        for i, s in enumerate(todo):
            disp = (jid if len(todo) == 1 else f"{jid}_{i}") if jid else None
            out.append(Started(s, outcome.ok, outcome.detail or (outcome.refused or ""),
                               refused=outcome.refused,
                               target=JobTarget(self.cfg.cluster, disp, job_name(self.rig, s if len(todo) == 1
                                                                                  else None), "")
                               if disp else None))
        return out

    # ----------------------------------------------------------------------------------------- observe

    def _array_sides(self, array_id: str) -> list[str] | None:
        if array_id in self._arrays:
            return self._arrays[array_id]
        try:
            data = json.loads((slurm_dir(self.rig) / f"array-{array_id}.json").read_text())
            sides = self._arrays[array_id] = [str(s) for s in data["sides"]]
            return sides
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def side_of(self, job: JobInfo) -> list[str]:
        """The side(s) a job row stands for (a pending array remainder `3-7%2` stands for several)."""
        base = job_name(self.rig, None)
        if job.name.startswith(base + "."):
            return [job.name[len(base) + 1:]]
        if job.name != base or not job.array_task_id or not job.array_job_id:
            return []
        sides = self._array_sides(job.array_job_id)
        if sides is None:
            return []
        idx: list[int] = []
        for part in job.array_task_id.split("%")[0].split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                idx.extend(range(int(lo), int(hi or lo) + 1))
        return [sides[i] for i in idx if i < len(sides)]

    async def observe(self, live: Any = None) -> Observation:
        """One squeue for the whole rig: every side's newest job → a Run. A side with no job row is
        absent from the result (the caller decides what a missing job means: not started, or gone)."""
        names = [job_name(self.rig, None), *(job_name(self.rig, s) for s in self.rig.sides)]
        rows, ev = await self.client.queue(names)
        if isinstance(rows, str):
            runs = {s: Run(s, KIND, State.UNKNOWN, "UNKNOWN", evidence=(ev,)) for s in self.rig.sides}
            return Observation(runs, ev)
        newest: dict[str, JobInfo] = {}
        for job in rows:
            for s in self.side_of(job):
                cur = newest.get(s)
                if cur is None or _newer(job, cur):
                    newest[s] = job
        runs = {}
        for s, job in newest.items():
            target = JobTarget(self.cfg.cluster, job.display_id, job.name, job.submit_time, state=job.state)
            rec = read_job_record(self.rig, s)
            runs[s] = Run(s, KIND, tri_state(job.state), job.state, where=job.node, targets=(target,),
                          evidence=(Evidence("squeue", True, detail=f"{job.display_id} {job.name} {job.state} "
                                                                      f"submitted {job.submit_time} "
                                                                      f"{job.reason}".strip()),),
                          detail={"job": {**job.to_json(), "record": rec}})
        return Observation(runs, ev, tuple(rows))

    # -------------------------------------------------------------------------------------- stop, requeue

    async def exact(self, side: str) -> tuple[JobInfo | None, str]:
        """The side's newest job, read exactly (scontrol) after finding it (squeue)."""
        obs = await self.observe()
        if obs.evidence.error:
            return None, f"squeue UNKNOWN: {obs.evidence.error}"
        run = obs.runs.get(side)
        if run is None or run.job is None:
            return None, f"side {side} has no job on {self.cfg.cluster}"
        tgt = run.job
        info = await self.client.lookup(tgt.job_id)
        if isinstance(info, str):
            return None, info
        return info, ""

    async def stop_plan(self, live: Any, side: str, *, heartbeat: str | None = None) -> Plan:
        """Op.STOP_JOB (or Op.RECOVER_JOB when the caller brings a heartbeat verdict: a hung side)."""
        info, why = await self.exact(side)
        op = Op.RECOVER_JOB if heartbeat is not None else Op.STOP_JOB
        if info is None:
            verdicts = {"job": "UNKNOWN" if "UNKNOWN" in why or "scontrol" in why else "DEAD"}
            if heartbeat is not None:
                verdicts["heartbeat"] = heartbeat
            return make_plan(op, side, self.cfg.host, (), verdicts, evidence=(why,), precondition=why)
        verdicts = {"job": tri_state(info.state).value}
        if heartbeat is not None:
            verdicts["heartbeat"] = heartbeat
        t = JobTarget(self.cfg.cluster, info.display_id, info.name, info.submit_time, state=info.state)
        return make_plan(op, side, self.cfg.host, (), verdicts, jobs=(t,),
                         evidence=(f"scontrol: {info.display_id} {info.name} {info.state} on {info.node} "
                                   f"submitted {info.submit_time}",),
                         action=f"scancel {info.display_id}")

    async def requeue_plan(self, live: Any, side: str) -> Plan:
        """Op.REQUEUE_JOB for a job lost before its run ended by itself, within the budget.

        "Lost" is SLURM's word (FAILED, NODE_FAIL, TIMEOUT, ...); "cut" is ours: the job's own record
        (job.json) never reached `ended`, so the run did not end on its own (a finished, given-up or
        refused run is not requeued: it would only repeat)."""
        info, why = await self.exact(side)
        if info is None:
            return make_plan(Op.REQUEUE_JOB, side, self.cfg.host, (), {"job": "UNKNOWN"}, evidence=(why,),
                             precondition=why)
        budget = self.cfg.requeue_budget
        used = info.restarts
        rec = read_job_record(self.rig, side)
        same_job = rec is not None and str(rec.get("job_id")) == info.job_id
        if rec is None or not same_job:
            run = "CUT"          # the job never got to write its record: it did not end by itself either
        else:
            run = "ENDED" if rec.get("status") == "ended" else "CUT"
        verdicts = {"job": "LOST" if info.state in LOST_STATES else info.state,
                    "budget": "UNKNOWN" if used is None else ("LEFT" if used < budget else "SPENT"),
                    "run": run}
        t = JobTarget(self.cfg.cluster, info.display_id, info.name, info.submit_time, state=info.state)
        return make_plan(Op.REQUEUE_JOB, side, self.cfg.host, (), verdicts, jobs=(t,),
                         evidence=(f"scontrol: {info.display_id} {info.state} (reason {info.reason}, exit "
                                   f"{info.exit_code}), requeued {used} of {budget} times",
                                   f"job record: {'status ' + str(rec.get('status')) if same_job and rec else 'none for this job'}"),
                         action=f"scontrol requeue {info.display_id} (it starts again after SLURM's requeue delay)")

    def guard(self, live: Any) -> Guard:
        return Guard(live.hosts, Audit(self.rig.state_dir), jobs={self.cfg.cluster: self.client})

    async def keep(self, live: Any, conf: Confirmation) -> list[Outcome]:
        """One pass of the rig's requeue policy: every side whose job was lost is requeued through the guard
        (the budget and the verdicts decide; the confirmation is the rig's policy, `via` says whose)."""
        obs = await self.observe(live)
        out = []
        for side, run in obs.runs.items():
            if run.state is State.DEAD and run.word in LOST_STATES:
                plan = await self.requeue_plan(live, side)
                out.append(await self.guard(live).execute(plan, conf))
        return out

    async def recover(self, live: Any, side: str, conf: Confirmation,
                      plan: Plan | None = None) -> tuple[Outcome, list[Started]]:
        """A hung side: its job cancelled by its exact id (Op.RECOVER_JOB needs the heartbeat STALE, read
        here from the side's log), then the side submitted again as a job of its own (resuming from its
        checkpoint under the harness's rule); the rig's other jobs are not touched."""
        if plan is None:   # else: the plan the operator confirmed (the guard re-verifies it before acting)
            live.follow_jobs()
            snap = await live.prober.side(side, rpc=False)
            plan = await self.stop_plan(live, side, heartbeat=snap.heartbeat.beat.value)
        outcome = await self.guard(live).execute(plan, conf)
        if not outcome.ok:
            return outcome, []
        return outcome, await self.start(live, [side], conf)

    async def stop_all(self, live: Any, conf: Confirmation) -> list[Outcome]:
        """Every live job of the rig cancelled through the guard, one plan per side (sim down, shutdown)."""
        obs = await self.observe(live)
        if obs.evidence.error:
            raise RuntimeError(f"squeue UNKNOWN: {obs.evidence.error}")
        out = []
        done: set[str] = set()
        for side, run in obs.runs.items():
            if run.state is State.DEAD or run.job is None:
                continue
            jid = run.job.job_id
            if jid in done:
                continue
            done.add(jid)
            out.append(await self.guard(live).execute(await self.stop_plan(live, side), conf))
        return out


def _newer(a: JobInfo, b: JobInfo) -> bool:
    """The later submission wins; a live job beats an ended one of the same second."""
    if a.submit_time != b.submit_time:
        return a.submit_time > b.submit_time   # ISO-8601: text order is time order
    return tri_state(a.state) is State.ALIVE and tri_state(b.state) is not State.ALIVE


async def wait_state(client: SlurmClient, job_id: str, want: frozenset[str], within: float) -> JobInfo | str:
    deadline = time.monotonic() + within
    last: JobInfo | str = "not read"
    while True:
        last = await client.lookup(job_id)
        if isinstance(last, JobInfo) and last.state in want:
            return last
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(0.25)
