"""`carla-console -c RIG harness SIDE [--as-host NAME]` (internal): the detached supervisor `launch` starts
(ops/actions/harness.py). --as-host: it runs on the rig's host NAME (started there over ssh), which is
then its local machine (ops/actions/remote.py on_host)."""
from __future__ import annotations

import argparse
import sys

from ops.actions.harness import main
from ops.model import RigConfig


def run(rig: RigConfig, args: argparse.Namespace) -> int:
    host = getattr(args, "as_host", None)
    if host is not None:
        from ops.actions.remote import on_host
        if host not in rig.hosts:
            print(f"carla-console harness: --as-host {host!r}: no such host in {rig.path} "
                  f"(hosts: {', '.join(sorted(rig.hosts))})", file=sys.stderr)
            return 2
        view = on_host(rig, host)
        if args.side in rig.sides and args.side not in view.sides:
            sc = rig.side(args.side)
            print(f"carla-console harness: side {args.side} does not run wholly on {host} (server on "
                  f"{sc.server.host}, evaluator on {sc.evaluator.host})", file=sys.stderr)
            return 2
        rig = view
    return main(rig, args.side, adopt=getattr(args, "adopt", False))
