"""`notify-test`: one test message to every `notify:` URL of the rig; exit 0 when every URL took it,
1 when one did not (each URL's outcome printed), 2 when the rig has no `notify:` list."""
from __future__ import annotations

import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_USAGE, print_json
from ops.model import RigConfig
from ops.notify import Notifier, NotifyEvent

WAIT_S = 60.0


def run(rig: RigConfig, args) -> int:
    if not rig.notify:
        print(f"carla-console: {rig.path} has no `notify:` list of apprise URLs", file=sys.stderr)
        return EXIT_USAGE
    n = Notifier.for_rig(rig)
    mark = len(n.results())
    n.send(NotifyEvent("test", "-", f"[{rig.name}] carla-console notify-test",
                       f"A test message from carla-console for rig {rig.name} ({rig.path}): sides "
                       f"{', '.join(rig.sides)}. If you read this, notifications reach you."))
    n.wait_idle(WAIT_S)
    got = [r for r in n.results()[mark:] if r.get("kind") == "test"]
    if getattr(args, "json", False):
        print_json({"urls": len(rig.notify), "results": got})
    else:
        for r in got:
            print(f"  {r['url']}: {r['outcome']}{' (' + r['error'] + ')' if r.get('error') else ''}")
    ok = len(got) == len(rig.notify) and all(r["outcome"] == "sent" for r in got)
    return EXIT_OK if ok else EXIT_FINDING
