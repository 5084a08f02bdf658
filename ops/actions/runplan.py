"""Which routes a launch runs, and which records it replaces: Bench2Drive's own rule, and ours.

Bench2Drive's `--resume` (route_indexer.validate_and_resume) restarts at the FIRST record whose status is
`Failed`, `Failed - Simulation crashed` or `Failed - Agent crashed` (one route earlier when entry_status is
`Crashed`) and re-runs EVERY route after it, replacing their records (statistics_manager.create_route_data):
an agent crash at route 2 and a simulator crash at route 7 re-run five Perfect routes, whose new scores
differ by chance. `Failed - Agent couldn't be set up` (GPU memory full while loading the model) is not in
that list: the real rule moves past it and a transient failure becomes a permanent 0.

Our rule, which changes no score the real rule would keep: run exactly the routes that have no record, or
whose record is one of those three statuses, or is `Failed - Agent couldn't be set up` with tries left
(SETUP_RETRIES, counted per route in the state dir); never a route the supervisor retired. How:
- nothing recorded yet: `fresh` (the user's routes file, no `--resume`);
- the real rule would run exactly these routes: `resume` (`--resume True`, the evaluator does it);
- otherwise: `subset` — the console writes a routes file holding only those routes (ElementTree copies of
  the user's `<route>` elements, in the state dir; the user's XML is never modified), runs the evaluator
  on it into a checkpoint of its own, and merges each finished record back into the side's checkpoint at
  its position (ops/actions/merge.py), after a backup.
Route ids here are the checkpoint's (`RouteScenario_<id>_rep<n>`); `retired=` also takes bare XML ids.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ops.parse.checkpoint import RERUN_STATUSES, STARTED, Checkpoint, resume_index

SETUP_FAILED = "Failed - Agent couldn't be set up"
SETUP_RETRIES = 2          # more tries a route lost to an agent set-up failure gets (then it keeps its 0)

Mode = Literal["fresh", "resume", "subset", "nothing"]


@dataclass(frozen=True)
class RunPlan:
    mode: Mode
    runs: tuple[str, ...]            # checkpoint route ids this launch runs, in order
    overwrites: tuple[str, ...]      # of those, the ones whose record it replaces
    reason: str                      # in words, for the dry-run, the modal and the harness log
    refused: str | None = None       # set when there is nothing to run
    real_runs: tuple[str, ...] = ()  # what Bench2Drive's own --resume would run (for comparison)
    retried: tuple[str, ...] = ()    # set-up failures given another try
    lost: tuple[str, ...] = ()       # set-up failures out of tries: kept as recorded
    retired: tuple[str, ...] = ()    # skipped: retired by the supervisor

    def to_json(self) -> dict:
        return {"mode": self.mode, "runs": list(self.runs), "overwrites": list(self.overwrites),
                "reason": self.reason, "refused": self.refused, "real_runs": list(self.real_runs),
                "retried": list(self.retried), "lost": list(self.lost), "retired": list(self.retired)}


def xml_id(checkpoint_id: str) -> str:
    """`RouteScenario_1711_rep0` → `1711` (the routes file's `id`)."""
    core = checkpoint_id.removeprefix("RouteScenario_")
    head, sep, _rep = core.rpartition("_rep")
    return head if sep else core


def _is_retired(cid: str, retired: Collection[str]) -> bool:
    return cid in retired or xml_id(cid) in retired


def real_runs(cp: Checkpoint | None, ids: Sequence[str]) -> tuple[str, ...]:
    """The routes Bench2Drive's `--resume True` would run on this checkpoint (all of them when it would
    reject the resume and empty the file)."""
    if cp is None:
        return tuple(ids)
    at = resume_index(cp)
    return tuple(ids) if at is None else tuple(ids[at:])


def plan_runs(cp: Checkpoint | None, ids: Sequence[str], *, retired: Collection[str] = (),
              setup_tries: Mapping[str, int] | None = None, setup_retries: int = SETUP_RETRIES) -> RunPlan:
    """Pure. cp: the side's parsed checkpoint (None: no file, or an empty one). ids: the routes file's
    checkpoint ids in order (times repetitions). The caller has already refused a checkpoint Bench2Drive
    would wipe (total or route-id mismatch, unreadable): that is ops/actions/resume.decide."""
    tries = setup_tries or {}
    records = list(cp.records) if cp is not None else []
    runs: list[str] = []
    overwrites: list[str] = []
    retried: list[str] = []
    lost: list[str] = []
    skipped: list[str] = []
    for i, cid in enumerate(ids):
        rec = records[i] if i < len(records) else None
        if _is_retired(cid, retired):
            skipped.append(cid)
            continue
        if rec is None or rec.status in RERUN_STATUSES or rec.status == STARTED:
            need = True
        elif rec.status == SETUP_FAILED:
            need = tries.get(cid, 0) < setup_retries
            (retried if need else lost).append(cid)
        else:
            need = False
        if need:
            runs.append(cid)
            if rec is not None:
                overwrites.append(cid)
    real = real_runs(cp if records else None, ids)

    def plan(mode: Mode, why: str, refused: str | None = None) -> RunPlan:
        return RunPlan(mode, tuple(runs), tuple(overwrites), why, refused, real, tuple(retried), tuple(lost),
                       tuple(skipped))

    if not runs:
        why = (f"nothing to run: all {len(ids)} routes have a final record"
               + (f" ({len(skipped)} retired)" if skipped else "")
               + (f"; {len(lost)} lost to agent set-up failures after {setup_retries} more tries: {', '.join(lost)}"
                  if lost else ""))
        return plan("nothing", why, refused=why)
    n_done = len(ids) - len(runs) - len(skipped)
    if not records and not skipped:
        return plan("fresh", f"no route recorded yet: all {len(runs)} routes, no --resume")
    if tuple(runs) == real and records:
        why = (f"{n_done} of {len(ids)} routes final; --resume True runs the remaining {len(runs)} "
               f"from {runs[0]}" + (f" (replacing {len(overwrites)} record(s))" if overwrites else ""))
        return plan("resume", why)
    extra = sorted(set(real) - set(runs), key=list(ids).index)
    why = (f"{n_done} of {len(ids)} routes final; running only the {len(runs)} that need it "
           f"(a routes subset into its own checkpoint, merged back)")
    if extra:
        why += f"; Bench2Drive's --resume would also re-run {len(extra)} final route(s)"
    if retried:
        why += f"; {len(retried)} agent set-up failure(s) get another try"
    if skipped:
        why += f"; {len(skipped)} retired route(s) skipped"
    return plan("subset", why)
