"""`retired [SIDE] [--put-back ROUTE] [--json]`: the routes the supervisor retired (quarantine), and putting
one back. A live supervisor takes the request from its side dir (putback.json) at its next look; with
none alive, harness.json is updated directly (atomically). A side on a remote (ssh) evaluator host: its
state is read, and these files written, on that host. Either way an audit line says who and what.
Exit 0; 2 unknown side or route; 3 refused (a remote write failed, or its supervisor UNKNOWN)."""
from __future__ import annotations

import asyncio
import json
import sys
import time

from console.cli.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, print_json
from ops.actions.audit import Audit
from ops.actions.supervise import PUTBACK_FILE
from ops.model import RigConfig
from ops.platform import atomic
from ops.platform.procs import read_proc
from ops.probes.harness_state import HarnessState, read_state, side_dir, state_path, write_state

READ_TIMEOUT_S = 10.0


def _alive(st: HarnessState) -> bool:
    p = read_proc(st.pid)
    return p is not None and p.state != "Z" and abs(p.create_time - st.create_time) <= 0.05


def _states(rig: RigConfig, sides: list[str]) -> dict[str, HarnessState | None | str]:
    """Each side's supervisor state, read on its evaluator's host (a remote one through ssh)."""
    if all(rig.hosts[rig.sides[s].evaluator.host].type == "local" for s in sides):
        return {s: read_state(rig, s) for s in sides}

    async def read() -> dict[str, HarnessState | None | str]:
        from ops.platform.factory import make_hosts
        from ops.probes.harness_state import read_state_on
        hosts = await make_hosts({rig.sides[s].evaluator.host: rig.hosts[rig.sides[s].evaluator.host] for s in sides})
        try:
            got = await asyncio.gather(*(read_state_on(hosts[rig.sides[s].evaluator.host], rig, s, READ_TIMEOUT_S)
                                         for s in sides))
        finally:
            for h in hosts.values():
                await h.close()
        return dict(zip(sides, got))
    return asyncio.run(read())


def _put_back_remote(rig: RigConfig, side: str, st: HarnessState, route: str) -> str:
    """The same two ways on the side's (ssh) evaluator host, its files written there through the host."""
    async def go() -> str:
        from ops.actions import remote
        from ops.platform.factory import make_hosts
        name = rig.sides[side].evaluator.host
        host = (await make_hosts({name: rig.hosts[name]}))[name]
        try:
            alive = await remote.alive_on(host, st.pid, st.create_time)
            if alive is None:
                return f"refused: supervisor {st.pid} on {host.name} UNKNOWN (its process table is unreadable)"
            if alive:
                path = str(side_dir(rig, side) / PUTBACK_FILE)
                why = await remote.write_file(host, path, json.dumps({"routes": [route], "at": time.time()}))
                return f"refused: {why}" if why else f"asked the running supervisor {st.pid} on {host.name} ({path})"
            st.retired.remove(route)
            st.route_failures[route] = 0
            why = await remote.write_file(host, str(state_path(rig, side)), json.dumps(st.to_json()))
            return f"refused: {why}" if why else f"harness.json on {host.name} updated (no supervisor running)"
        finally:
            await host.close()
    return asyncio.run(go())


def run(rig: RigConfig, args) -> int:
    sides = [args.side] if args.side else list(rig.sides)
    for s in sides:
        if s not in rig.sides:
            print(f"carla-console: unknown side {s!r} (sides: {', '.join(rig.sides)})", file=sys.stderr)
            return EXIT_USAGE
    states = _states(rig, sides)
    if args.put_back:
        if not args.side:
            print("carla-console: --put-back needs a SIDE", file=sys.stderr)
            return EXIT_USAGE
        st = states[args.side]
        if not isinstance(st, HarnessState) or args.put_back not in st.retired:
            print(f"carla-console: route {args.put_back!r} is not retired on side {args.side}", file=sys.stderr)
            return EXIT_USAGE
        if rig.hosts[rig.sides[args.side].evaluator.host].type != "local":
            how = _put_back_remote(rig, args.side, st, args.put_back)
            if how.startswith("refused: "):
                print(f"carla-console: {how[9:]}", file=sys.stderr)
                return EXIT_REFUSED
        elif _alive(st):
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
