"""The rig config for N sides that run the N parts of a split.

From an existing rig (`-c`): the whole config, its first side copied once per part with the part's routes
file, its own checkpoint and log, and ports moved by 10 a side (N, N+1, N+2 and the TM port), so that
`check-config` accepts it as written. Paths that the original resolved against its own folder are written
absolute (the new file lives elsewhere). Without a rig: a `sides:` template with <...> fields to fill.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Sequence

import yaml

from ops.model import RigConfig

PORT_STEP = 10


def template(files: Sequence[str]) -> str:
    lines = ["# One side per part (carla-console split). Fill the <...> fields, merge into your rig.yaml.",
             "sides:"]
    for i, f in enumerate(files):
        name = f"part{i}"
        rpc = 2000 + PORT_STEP * i
        lines += [f"  {name}:",
                  "    server:",
                  "      host: <host>",
                  "      command: [<CarlaUE4.sh>, -RenderOffScreen, -nosound]",
                  f"      rpc_port: {rpc}   # uses {rpc}-{rpc + 2}",
                  "    evaluator:",
                  "      host: <host>",
                  "      conda_env: <env>",
                  "      cwd: <evaluator checkout>",
                  "      script: leaderboard/leaderboard/leaderboard_evaluator.py",
                  f"      routes: {os.path.abspath(f)}",
                  f"      checkpoint: results/{name}/result.json",
                  f"      log: logs/{name}/eval.log",
                  f"      tm_port: {8010 + PORT_STEP * i}"]
    return "\n".join(lines) + "\n"


def from_rig(rig: RigConfig, files: Sequence[str], stem: str) -> str:
    """A complete config: the rig's own, with one side per part modelled on its first side."""
    with open(rig.path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    first_name = next(iter(rig.sides))
    first = rig.sides[first_name]
    model = raw["sides"][first_name]
    raw["state_dir"] = rig.state_dir
    for name, host in rig.hosts.items():
        if host.known_hosts:
            raw["hosts"][name]["known_hosts"] = host.known_hosts
        if host.client_keys:
            raw["hosts"][name]["client_keys"] = list(host.client_keys)
    sides = {}
    for i, part in enumerate(files):
        side = copy.deepcopy(model)
        name = f"{stem}_part{i}"
        side["server"]["rpc_port"] = first.server.rpc_port + PORT_STEP * i
        ev = side["evaluator"]
        ev["cwd"] = first.evaluator.cwd
        ev["routes"] = os.path.abspath(part)
        ev["checkpoint"] = f"results/{name}/result.json"
        ev["log"] = f"logs/{name}/eval.log"
        ev["tm_port"] = first.evaluator.tm_port + PORT_STEP * i
        sides[name] = side
    raw["sides"] = sides
    head = (f"# {len(files)} sides, one per part of a split (carla-console split), modelled on side "
            f"{first_name!r} of {rig.path}.\n")
    return head + yaml.safe_dump(raw, sort_keys=False)
