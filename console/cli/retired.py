"""`retired [SIDE] [--put-back ROUTE] [--json]`: the routes the supervisor retired (quarantine), and putting
one back. A live supervisor takes the request from its side dir (putback.json) at its next look; with
none alive, harness.json is updated directly (atomically). Either way an audit line says who and what.
Exit 0; 2 unknown side or route."""
from __future__ import annotations

import sys
import time

from console.cli.exits import EXIT_OK, EXIT_USAGE, print_json
from ops.actions.audit import Audit
from ops.actions.supervise import PUTBACK_FILE
from ops.model import RigConfig
from ops.platform import atomic
from ops.platform.procs import read_proc
from ops.probes.harness_state import HarnessState, read_state, side_dir, write_state


def _alive(st: HarnessState) -> bool:
    p = read_proc(st.pid)
    return p is not None and p.state != "Z" and abs(p.create_time - st.create_time) <= 0.05


def run(rig: RigConfig, args) -> int:
    sides = [args.side] if args.side else list(rig.sides)
    for s in sides:
        if s not in rig.sides:
            print(f"carla-console: unknown side {s!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
            return EXIT_USAGE
    states = {s: read_state(rig, s) for s in sides}
    if args.put_back:
        if not args.side:
            print("carla-console: --put-back needs a SIDE", file=sys.stderr)
            return EXIT_USAGE
        st = states[args.side]
        if not isinstance(st, HarnessState) or args.put_back not in st.retired:
            print(f"carla-console: route {args.put_back!r} is not retired on side {args.side}", file=sys.stderr)
            return EXIT_USAGE
        if _alive(st):
            path = side_dir(rig, args.side) / PUTBACK_FILE
            atomic.write_json(path, {"routes": [args.put_back], "at": time.time()})
            how = f"asked the running supervisor {st.pid} ({path})"
        else:
            st.retired.remove(args.put_back)
            st.route_failures[args.put_back] = 0
            write_state(rig, st)
            how = "harness.json updated (no supervisor running)"
        Audit(rig.state_dir).write({"side": args.side, "host": rig.sides[args.side].evaluator.host,
                                    "operation": "put-back-route", "outcome": "done",
                                    "detail": f"route {args.put_back} put back: {how}", "targets": []})
        print(f"{args.side}: {args.put_back} put back ({how}); the next attempt runs it")
        return EXIT_OK
    out: dict[str, dict] = {}
    for s, st in states.items():
        if isinstance(st, HarnessState):
            out[s] = {"retired": list(st.retired), "route_failures": dict(st.route_failures)}
        else:
            out[s] = {"retired": [], "route_failures": {}, "error": st if isinstance(st, str) else None}
    if args.json:
        print_json({"sides": out})
    else:
        for s, v in out.items():
            names = ", ".join(f"{r} ({v['route_failures'].get(r, '?')} failures)" for r in v["retired"]) or "none"
            print(f"{s}: retired {names}")
    return EXIT_OK
