"""The merged result as JSON, CSV (one row per route) and a human table."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from ops.parse.checkpoint import MIN_SPEED
from ops.results.abilities import TRAFFIC_SIGNS, ability_mean
from ops.results.fake_success import FakeSuccess
from ops.results.merge import DUPLICATE_RULE, Merged, RouteRow
from ops.results.per_km import infractions_per_km, km_driven

CSV_COLUMNS = ("route_id", "town", "scenario_type", "abilities", "state", "status", "source", "ds",
               "score_route", "score_penalty", "success", "infractions", "min_speed_infractions",
               "route_length_m", "duration_game_s", "duration_system_s", "wall_game", "attempts")


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def penalty_infractions(row: RouteRow) -> int:
    """Infraction events other than min-speed (which decides neither DS nor success)."""
    if row.record is None:
        return 0
    return sum(n for k, n in row.record.infractions.items() if k != MIN_SPEED)


def row_json(row: RouteRow, attempts: int | None = None) -> dict:
    rec = row.record
    return {
        "route_id": row.route.route_id, "town": row.route.town, "scenario_type": row.route.scenario_type,
        "abilities": list(row.abilities), "state": row.state, "retired": row.retired,
        "status": rec.status if rec else None, "source": row.source,
        "ds": _r(row.ds) if rec else None, "score_route": _r(rec.score_route) if rec else None,
        "score_penalty": _r(rec.score_penalty) if rec else None, "success": row.success,
        "infractions": penalty_infractions(row) if rec else None,
        "min_speed_infractions": rec.infractions.get(MIN_SPEED, 0) if rec else None,
        "route_length_m": _r(rec.route_length if rec and rec.route_length is not None else row.route.length_m, 3),
        "duration_game_s": rec.duration_game if rec else None,
        "duration_system_s": rec.duration_system if rec else None,
        "wall_game": _r(row.wall_game, 3), "attempts": attempts,
    }


def to_json(m: Merged, *, routes_files: Sequence[str] = (), sources: Sequence[str] = (),
            fake: FakeSuccess | None = None, attempts: dict[str, int] | None = None) -> dict:
    recorded = [r.record for r in m.rows if r.record is not None]
    per_km = infractions_per_km(recorded)
    attempts = attempts or {}
    return {
        "routes_files": list(routes_files), "sources": list(sources),
        "total": m.total, "recorded": m.recorded,
        "missing": list(m.missing), "retired": list(m.retired),
        "duplicates": [d.route_id for d in m.duplicates],
        "duplicate_detail": [{"route_id": d.route_id, "sources": list(d.sources), "scores": list(d.scores),
                              "kept": d.kept} for d in m.duplicates],
        "duplicate_rule": DUPLICATE_RULE,
        "extras": [{"source": e.source, "route_id": e.route_id} for e in m.extras],
        "unscored": list(m.unscored),
        "ds": _r(m.ds), "sr": _r(m.sr), "ds_recorded": _r(m.ds_recorded), "sr_recorded": _r(m.sr_recorded),
        "abilities": {name: _r(s.value) for name, s in m.abilities.items()},
        "ability_detail": {name: {"success": s.success, "recorded": s.recorded, "routes": s.routes,
                                  "lower_bound": s.lower_bound} for name, s in m.abilities.items()},
        "ability_mean": _r(ability_mean(m.abilities)),
        "lower_bounds": [n for n, s in m.abilities.items() if s.lower_bound],
        "km_driven": _r(km_driven(recorded), 3) if recorded else None,
        "infractions_per_km": None if per_km is None else {k: round(v, 3) for k, v in per_km.items()},
        "fake_success": None if fake is None else fake.to_json(),
        "routes": [row_json(r, attempts.get(r.route.route_id)) for r in m.rows],
    }


def to_csv(m: Merged, attempts: dict[str, int] | None = None) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in m.rows:
        d = row_json(row, (attempts or {}).get(row.route.route_id))
        d["abilities"] = ";".join(d["abilities"])
        w.writerow({k: "" if d[k] is None else d[k] for k in CSV_COLUMNS})
    return out.getvalue()


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ids(ids: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", … (+{len(ids) - limit})" if len(ids) > limit else "")


def _f(value: float | int | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def to_table(m: Merged, *, fake: FakeSuccess | None = None, attempts: dict[str, int] | None = None) -> str:
    lines = [f"routes {m.total}   recorded {m.recorded}   missing {len(m.missing)}   retired {len(m.retired)}   "
             f"duplicates {len(m.duplicates)}",
             f"DS {m.ds:.3f}   SR {_pct(m.sr)}   (Bench2Drive rules: over all {m.total} routes, missing = 0)"
             if m.ds is not None else "DS -",
             f"so far: DS {m.ds_recorded:.3f}   SR {_pct(m.sr_recorded)} over {m.recorded} recorded"
             if m.ds_recorded is not None else "so far: nothing recorded"]
    lines.append("abilities: " + "   ".join(
        f"{name} {_pct(s.value)}{' (lower bound: no map data)' if s.lower_bound else ''} [{s.success}/{s.recorded}]"
        for name, s in m.abilities.items()))
    if fake is not None and fake.flagged:
        lines.append(f"FAKE SUCCESS? {fake.message}")
    for dup in m.duplicates:
        lines.append(f"duplicate {dup.route_id}: in {', '.join(dup.sources)}; counted once (from {dup.kept})")
    if m.missing:
        lines.append(f"missing ({len(m.missing)}): {_ids(m.missing)}")
    if m.retired:
        lines.append(f"retired by the supervisor ({len(m.retired)}): {_ids(m.retired)}")
    for e in m.extras:
        lines.append(f"not in the routes file, not counted: {e.route_id} (in {e.source})")
    lines.append("")
    head = f"{'route':>6} {'town':<9} {'scenario type':<34} {'status':<22} {'DS':>7} {'pen':>5} {'inf':>3} {'w/g':>6} {'att':>3}"
    lines += [head, "-" * len(head)]
    for row in m.rows:
        d = row_json(row, (attempts or {}).get(row.route.route_id))
        status = d["status"] or row.state.upper()
        lines.append(f"{d['route_id']:>6} {d['town']:<9} {(d['scenario_type'] or '-')[:34]:<34} {status[:22]:<22} "
                     f"{_f(d['ds'], '.1f'):>7} {_f(d['score_penalty'], '.2f'):>5} {_f(d['infractions'], 'd'):>3} "
                     f"{_f(d['wall_game'], '.1f', 'x'):>6} {_f(d['attempts'], 'd'):>3}")
    if any(s.lower_bound for s in m.abilities.values()):
        lines.append(f"\n{TRAFFIC_SIGNS} is a lower bound: Bench2Drive gives failed routes of it partial credit "
                     "from CARLA's maps, which are not read here.")
    return "\n".join(lines) + "\n"
