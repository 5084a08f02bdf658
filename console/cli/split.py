"""`carla-console split`: route files balanced by expected wall time (and a stratified smoke sample).

Each part holds the original file's head and tail and its <route> elements byte-for-byte; the user's
routes file is only read. Existing part files are not overwritten without --force.
"""
from __future__ import annotations

import argparse
import os
import sys

from console.cli.exits import EXIT_OK, EXIT_USAGE, print_json
from ops.results import rig_snippet
from ops.results.eta import town_wall
from ops.results.load import load_files, read_routes
from ops.results.split import balance, part_bytes, sample, spread
from ops.results.walltime import TownWall


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("split", help="route files balanced by expected wall time")
    p.add_argument("--routes", required=True, metavar="XML")
    p.add_argument("--parts", required=True, type=int, metavar="N")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--stats", nargs="+", default=[], metavar="CHECKPOINT",
                   help="checkpoints of an earlier run: mean wall time per town (else a prior)")
    p.add_argument("--sample", type=int, metavar="K", help="first draw K routes stratified by town")
    p.add_argument("--force", action="store_true", help="overwrite part files that exist")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """With -c, the config written for the parts is the rig's own with one side per part; else a template."""
    problems: list[str] = []
    rig = None
    if args.config:
        from ops.config import ConfigError, load_config
        try:
            rig = load_config(args.config)
        except ConfigError as e:
            problems.append(f"{args.config}: {e}")
    if args.parts < 1:
        problems.append(f"--parts {args.parts}: must be at least 1")
    if args.sample is not None and args.sample < 1:
        problems.append(f"--sample {args.sample}: must be at least 1")
    table = read_routes(args.routes)
    if isinstance(table, str):
        problems.append(table)
    stats = load_files(args.stats) if args.stats else None
    if stats is not None:
        problems += stats.errors
    if problems or isinstance(table, str):
        return _usage(problems)
    routes = sample(table, args.sample) if args.sample else table.routes
    if args.parts > len(routes):
        return _usage([f"--parts {args.parts}: more parts than routes ({len(routes)})"])
    model = (town_wall(table.routes, [r for s in stats.sources for r in s.checkpoint.records])
             if stats is not None else TownWall())
    parts = balance(routes, args.parts, lambda r: model.expected_s(r.town, r.length_m))
    stem = os.path.splitext(os.path.basename(args.routes))[0] + (f"_sample{len(routes)}" if args.sample else "")
    files = [os.path.join(args.out, f"{stem}_part{i}.xml") for i in range(args.parts)]
    src = os.path.realpath(args.routes)
    clash = [f for f in files if os.path.realpath(f) == src]
    exists = [f for f in files if os.path.exists(f)] if not args.force else []
    if clash or exists:
        return _usage([f"{f}: is the routes file itself (never overwritten)" for f in clash]
                      + [f"{f}: exists (use --force to overwrite)" for f in exists])
    os.makedirs(args.out, exist_ok=True)
    for f, part in zip(files, parts):
        tmp = f + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(part_bytes(table, part.routes))
        os.replace(tmp, f)
    if rig is not None:
        snippet_path, snippet = os.path.join(args.out, f"{stem}_rig.yaml"), rig_snippet.from_rig(rig, files, stem)
    else:
        snippet_path, snippet = os.path.join(args.out, f"{stem}_sides.yaml"), rig_snippet.template(files)
    with open(snippet_path, "w", encoding="utf-8") as fh:
        fh.write(snippet)
    data = {
        "routes": args.routes, "out": args.out,
        "parts": [{"file": f, "routes": [r.route_id for r in p.routes], "expected_s": round(p.expected_s, 1),
                   "towns": _towns(p.routes)} for f, p in zip(files, parts)],
        "spread": round(spread(parts), 4),
        "basis": {"stats": list(args.stats), "towns_seen": sorted(model.observed), "rests_on": model.samples,
                  "prior_scale": round(model.scale, 4)},
        "sample": None if not args.sample else {"k": len(routes), "by_town": _towns(routes)},
        "config_snippet": snippet_path,
    }
    if args.json:
        print_json(data)
    else:
        for d in data["parts"]:
            print(f"{d['file']}: {len(d['routes'])} routes, expected {d['expected_s'] / 3600:.1f} h")
        print(f"spread between parts: {100 * data['spread']:.1f}%   rig config for {args.parts} sides: {snippet_path}")
    return EXIT_OK


def _towns(routes) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in routes:
        out[r.town] = out.get(r.town, 0) + 1
    return out


def _usage(lines: list[str]) -> int:
    print("carla-console split: cannot split:", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return EXIT_USAGE
