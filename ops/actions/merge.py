"""A subset run (ops/actions/runplan.py, mode `subset`): its routes file, and merging its records back.

The subset's routes file is the user's `<route>` elements that need a run, copied by ElementTree into the
state dir (the user's file is only read). The evaluator writes the subset's results into a checkpoint of
its own; each finished record is put back into the side's checkpoint at its route's position, index
rewritten, the record itself byte-for-byte the evaluator's (no score is touched). The side's checkpoint
keeps Bench2Drive's invariants so that a later plain `--resume True` still works on it: records are the
routes in file order (a contiguous prefix), `progress[0]` never exceeds the records and never passes a
record that still needs a run. It is written atomically (the evaluator's own writes are not), after the
backup the launch makes.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ops.actions.runplan import xml_id
from ops.parse.checkpoint import RERUN_STATUSES, STARTED


def subset_routes_xml(user_xml: bytes, wanted: Collection[str]) -> bytes:
    """The user's routes file with only the `<route>`s whose id (bare XML id) is in `wanted`."""
    root = ET.fromstring(user_xml)
    keep = {xml_id(w) for w in wanted}
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag == "route" and child.attrib.get("id") not in keep:
                parent.remove(child)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


@dataclass(frozen=True)
class MergeResult:
    data: dict | None               # the new side checkpoint; None when nothing changed
    merged: tuple[str, ...] = ()    # route ids whose record was put in
    pending: tuple[str, ...] = ()   # finished in the subset but not placeable yet (a route before them
    #                                 has no record): they stay in the subset's checkpoint, nothing lost


def merge_records(main: dict | None, sub: dict, ids: Sequence[str]) -> MergeResult:
    """Put `sub`'s finished records into `main` (None: no side checkpoint yet). ids: the full route list."""
    pos = {cid: i for i, cid in enumerate(ids)}
    base = main if isinstance(main, dict) and isinstance(main.get("_checkpoint"), dict) else _empty(len(ids))
    out = json.loads(json.dumps(base))      # a deep copy: the caller's dict is left as it was
    records: list[dict] = list(out["_checkpoint"].get("records") or [])
    sub_records = [r for r in ((sub.get("_checkpoint") or {}).get("records") or [])
                   if isinstance(r, dict) and r.get("status") not in (None, STARTED)]
    merged: list[str] = []
    pending: list[str] = []
    for rec in sorted(sub_records, key=lambda r: pos.get(str(r.get("route_id")), math.inf)):
        cid = str(rec.get("route_id"))
        p = pos.get(cid)
        if p is None:
            continue                     # not a route of this side's file: never placed
        new = {**rec, "index": p}
        if p < len(records):
            if records[p] == new:
                continue
            records[p] = new
        elif p == len(records):
            records.append(new)
        else:
            pending.append(cid)
            continue
        merged.append(cid)
    if not merged:
        return MergeResult(None, (), tuple(pending))
    final = 0
    while final < len(records) and records[final].get("status") not in RERUN_STATUSES:
        final += 1
    out["_checkpoint"]["records"] = records
    out["_checkpoint"]["progress"] = [final, len(ids)]
    complete = final == len(ids)
    sub_status = sub.get("entry_status")
    if complete:
        out["entry_status"] = sub_status if sub_status in ("Finished", "Rejected", "Crashed") else "Finished"
        out["_checkpoint"]["global_record"] = _global(records)
    else:
        out["entry_status"] = sub_status if sub_status in ("Crashed", "Rejected") else "Started"
        out["_checkpoint"]["global_record"] = {}
    out["eligible"] = out["entry_status"] == "Finished"
    if sub.get("sensors"):
        out["sensors"] = sub["sensors"]
    return MergeResult(out, tuple(merged), tuple(pending))


def _empty(total: int) -> dict:
    return {"_checkpoint": {"global_record": {}, "progress": [0, total], "records": []},
            "entry_status": "Started", "eligible": False, "sensors": [], "values": [], "labels": []}


def _global(records: list[dict]) -> dict:
    """The parts of Bench2Drive's global record that follow from the records alone (means over all
    routes, totals, exceptions); the per-km infraction rates are left to the results tools."""
    n = max(len(records), 1)
    keys = ("score_composed", "score_route", "score_penalty")
    mean = {k: round(sum(float((r.get("scores") or {}).get(k) or 0) for r in records) / n, 6) for k in keys}
    totals = {"total_length": 0.0, "duration_game": 0.0, "duration_system": 0.0}
    exceptions: list[list] = []
    status = "Perfect"
    for r in records:
        m = r.get("meta") or {}
        for k, mk in (("total_length", "route_length"), ("duration_game", "duration_game"),
                      ("duration_system", "duration_system")):
            totals[k] += float(m.get(mk) or 0)
        st = str(r.get("status"))
        if st.startswith("Failed"):
            exceptions.append([r.get("route_id"), r.get("index"), st])
            status = "Failed"
        elif status == "Perfect" and st != "Perfect":
            status = st
    return {"index": -1, "route_id": -1, "status": status, "scores_mean": mean,
            "meta": {**totals, "exceptions": exceptions},
            "note": "merged by carla-console from a subset run; infraction rates: see `carla-console results`"}
