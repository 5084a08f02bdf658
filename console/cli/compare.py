"""`carla-console compare RUN_A RUN_B`: paired per-route ΔDS with σ_d, the MDE and the flips.

A run is a checkpoint file, a comma-separated list of them, a folder of them, or a rig config (.yaml/.yml:
its sides' checkpoints). Within a run a route recorded twice counts its first record (as in `results`).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys

from console.cli.exits import EXIT_OK, EXIT_USAGE, print_json
from ops.parse.checkpoint import RouteRecord
from ops.results import report_html
from ops.results.load import load_files, read_rig
from ops.results.merge import Source, route_key
from ops.results.paired import Comparison, compare
from ops.results.textplot import delta_plot


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="paired per-route ΔDS of two runs, σ_d, MDE, flips")
    p.add_argument("run_a", metavar="RUN_A", help="checkpoint file(s, comma-separated), a folder, or a rig .yaml")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--json", action="store_true")
    p.add_argument("--report", metavar="FILE.html", help="write a static HTML report with a ΔDS plot")


def records_by_route(sources: list[Source]) -> dict[str, RouteRecord]:
    out: dict[str, RouteRecord] = {}
    for src in sources:
        for rec in src.checkpoint.records:
            if rec.finished:
                out.setdefault(route_key(rec.route_id), rec)
    return out


def load_run(spec: str) -> tuple[list[Source], list[str]]:
    if spec.endswith((".yaml", ".yml")) and os.path.isfile(spec):
        from ops.config import ConfigError, load_config
        try:
            rig = load_config(spec)
        except ConfigError as e:
            return [], [f"{spec}: {e}"]
        read = asyncio.run(read_rig(rig))
        return list(read.sources), list(read.errors)
    loaded = load_files([p for p in spec.split(",") if p])
    return list(loaded.sources), list(loaded.errors)


def to_json(cmp: Comparison, a: str, b: str) -> dict:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 6)
    route = lambda p: {"route_id": p.route_id, "status_a": p.status_a, "status_b": p.status_b,  # noqa: E731
                       "ds_a": p.ds_a, "ds_b": p.ds_b, "delta": round(p.delta, 6), "flip": p.flip}
    return {"a": a, "b": b, "n": cmp.n, "mean_delta": r(cmp.mean_delta), "sd_delta": r(cmp.sd_delta),
            "mde": r(cmp.mde), "significant": cmp.significant, "verdict": cmp.verdict,
            "flips": [route(p) for p in cmp.flips], "routes": [route(p) for p in cmp.routes],
            "only_a": list(cmp.only_a), "only_b": list(cmp.only_b)}


def run(args: argparse.Namespace) -> int:
    a, errs_a = load_run(args.run_a)
    b, errs_b = load_run(args.run_b)
    problems = [*errs_a, *errs_b]
    problems += [f"{spec}: no checkpoint in it" for spec, src, errs in ((args.run_a, a, errs_a), (args.run_b, b, errs_b))
                 if not src and not errs]
    if problems:
        print("carla-console compare: cannot read the runs:", file=sys.stderr)
        for e in problems:
            print(f"  {e}", file=sys.stderr)
        return EXIT_USAGE
    cmp = compare(records_by_route(a), records_by_route(b))
    if args.report:
        tmp = args.report + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(report_html.render(cmp, args.run_a, args.run_b))
        os.replace(tmp, args.report)
    if args.json:
        print_json(to_json(cmp, args.run_a, args.run_b))
        return EXIT_OK
    print(f"n {cmp.n}   mean ΔDS (B-A) {_f(cmp.mean_delta, '+.2f')}   σ_d {_f(cmp.sd_delta)}   "
          f"MDE {_f(cmp.mde)}   → {cmp.verdict}")
    if cmp.routes:
        plot = delta_plot(cmp, half_height=4)
        print(f"per-route ΔDS, routes in id order (full bar = {plot.scale:.0f}; dots: ±MDE; F: flip)")
        print("\n".join(plot.lines))
        print("".join("F" if k == "flip" else " " for k in plot.kinds).rstrip())
    if cmp.flips:
        print(f"flips ({len(cmp.flips)}):")
        for p in cmp.flips:
            print(f"  {p.route_id:>6}  {p.status_a} → {p.status_b}   {p.ds_a:.1f} → {p.ds_b:.1f} ({p.delta:+.1f})")
    for p in cmp.routes:
        if not p.flip:
            print(f"  {p.route_id:>6}  {p.ds_a:6.1f} → {p.ds_b:6.1f}  ({p.delta:+.1f})")
    if cmp.only_a or cmp.only_b:
        print(f"only in A: {len(cmp.only_a)}   only in B: {len(cmp.only_b)} (not paired)")
    if args.report:
        print(f"report: {args.report}")
    return EXIT_OK


def _f(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)
