"""`carla-console results`: the merged result of a rig or of given checkpoint files, by Bench2Drive's rules.

Exit: 0 clean; 1 a finding (missing, duplicate, retired or foreign routes, an unreadable side, a fake-success
flag); 2 usage or unreadable input, every problem listed at once.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_USAGE, print_json
from ops.results import render
from ops.results.attempts import route_attempts
from ops.results.eta import estimate
from ops.results.fake_success import check as fake_check
from ops.results.live import hours
from ops.results.load import load_files, read_rig, read_routes
from ops.results.merge import merge
from ops.results.routes_xml import union


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="merged DS/SR/abilities by Bench2Drive's rules (a rig, or files)")
    p.add_argument("--checkpoint", nargs="+", metavar="F", help="checkpoint files or folders of them "
                   "(earlier ones win a duplicate); without it, the rig's sides (-c)")
    p.add_argument("--routes", metavar="XML", help="the routes file whose route count is the denominator "
                   "(required with --checkpoint; with a rig, overrides the sides' routes files)")
    p.add_argument("--side", action="append", metavar="NAME", help="only this side of the rig (repeatable)")
    p.add_argument("--retired", nargs="+", default=[], metavar="ID", help="route ids retired by the supervisor")
    p.add_argument("--expect-wall-game-min", type=float, metavar="X",
                   help="fake-success floor for the wall/game ratio (a rig's sides have it in the config)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true", help="one row per route")


def _err(lines: list[str]) -> int:
    print("carla-console results: cannot read the input:", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace, load_rig) -> int:
    if args.checkpoint:
        return _files(args)
    return asyncio.run(_rig(args, load_rig()))


def _emit(args: argparse.Namespace, merged, data: dict, fake, attempts: dict | None = None) -> None:
    if args.json:
        print_json(data)
    elif args.csv:
        sys.stdout.write(render.to_csv(merged, attempts))
    else:
        sys.stdout.write(render.to_table(merged, fake=fake, attempts=attempts))


def _finding(merged, fake, errors=()) -> bool:
    return bool(merged.missing or merged.duplicates or merged.extras or merged.retired or errors
                or (fake is not None and fake.flagged))


def _files(args: argparse.Namespace) -> int:
    if not args.routes:
        return _err(["--routes XML is required with --checkpoint (its route count is the denominator)"])
    table = read_routes(args.routes)
    loaded = load_files(args.checkpoint)
    errors = list(loaded.errors) + ([table] if isinstance(table, str) else [])
    if errors or isinstance(table, str):
        return _err(errors)
    merged = merge(table.routes, loaded.sources, retired=args.retired)
    fake = fake_check((r.record for r in merged.rows if r.record), args.expect_wall_game_min)
    data = render.to_json(merged, routes_files=[args.routes], sources=[s.label for s in loaded.sources],
                          fake=fake if args.expect_wall_game_min is not None else None)
    data["skipped"] = list(loaded.skipped)
    data["errors"] = []
    _emit(args, merged, data, fake)
    for s in loaded.skipped:
        print(f"skipped {s}", file=sys.stderr)
    return EXIT_FINDING if _finding(merged, fake) else EXIT_OK


def _side_line(name: str, m, eta, fake, errors) -> str:
    if m is None:
        return f"side {name}: routes file unreadable" + (f" ({errors[0]})" if errors else "")
    line = f"side {name}: recorded {m.recorded}/{m.total}"
    if m.ds_recorded is not None:
        line += f"   DS so far {m.ds_recorded:.2f}   SR so far {100 * (m.sr_recorded or 0):.1f}%"
    if eta is not None and eta.eta_s is not None:
        line += "   ETA done" if eta.routes_left == 0 else f"   ETA {hours(eta.eta_s)} (on {eta.rests_on} routes)"
    if fake.flagged:
        line += f"   FAKE SUCCESS? {fake.message}"
    return line


async def _rig(args: argparse.Namespace, rig) -> int:
    names = args.side or list(rig.sides)
    unknown = [n for n in names if n not in rig.sides]
    if unknown:
        return _err([f"{rig.path}: no side named {n!r} (sides: {', '.join(rig.sides)})" for n in unknown])
    read = await read_rig(rig, names)
    override = read_routes(args.routes) if args.routes else None
    if isinstance(override, str):
        return _err([override])
    tables = [override] if override is not None else [s.routes for s in read.sides if s.routes is not None]
    if not tables:
        return _err(list(read.errors) or ["no routes file could be read"])
    routes = union(tables)
    retired = list(args.retired) + list(read.retired)
    merged = merge(routes, read.sources, retired=retired)
    sides: dict[str, dict] = {}
    flagged = None
    side_lines: list[str] = []
    for s in read.sides:
        records = s.checkpoint.records if s.checkpoint else ()
        side_routes = s.routes.routes if s.routes is not None else ()
        floor = args.expect_wall_game_min if args.expect_wall_game_min is not None else s.expect_wall_game_min
        fake = fake_check(records, floor)
        side_merged = merge(side_routes, [src for src in read.sources if src.label == f"side:{s.side}"],
                            retired=s.retired) if side_routes else None
        eta = estimate(side_routes, records, s.retired) if side_routes else None
        sides[s.side] = {
            "checkpoint": s.checkpoint_path, "routes": s.routes_path, "errors": list(s.errors),
            "total": side_merged.total if side_merged else None,
            "recorded": side_merged.recorded if side_merged else None,
            "ds": render._r(side_merged.ds) if side_merged else None,
            "sr": render._r(side_merged.sr) if side_merged else None,
            "ds_recorded": render._r(side_merged.ds_recorded) if side_merged else None,
            "fake_success": fake.to_json(), "eta": eta.to_json() if eta else None,
            "attempts": s.attempts, "retired": list(s.retired)}
        if fake.flagged:
            flagged = fake
        side_lines.append(_side_line(s.side, side_merged, eta, fake, s.errors))
    attempts = route_attempts(merged, read.route_failures)
    data = render.to_json(merged, routes_files=[s.routes_path for s in read.sides] if override is None
                          else [args.routes], sources=[src.label for src in read.sources], fake=flagged,
                          attempts=attempts)
    data["sides"] = sides
    data["fake_success_sides"] = [n for n, d in sides.items() if d["fake_success"]["flagged"]]
    data["errors"] = list(read.errors)
    if not (args.json or args.csv):
        print("\n".join(side_lines))
    _emit(args, merged, data, flagged, attempts)
    for e in read.errors:
        print(f"warning: {e}", file=sys.stderr)
    return EXIT_FINDING if _finding(merged, flagged, read.errors) else EXIT_OK
