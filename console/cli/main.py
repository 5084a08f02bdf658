"""The command line: `carla-console [-c FILE] [--read-only] [--demo] [COMMAND ...]`.

Exit codes (design.md §3): 0 ok, 1 a finding, 2 usage or config error, 3 refused (fail-closed).
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from console.cli.exits import EXIT_OK, EXIT_USAGE
from ops.config import ConfigError, default_config_path, load_config
from ops.model import RigConfig
from ops.platform.child_watch import use_pidfd_child_watcher


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="carla-console", description="Run and rescue CARLA evaluation rigs.")
    ap.add_argument("-c", "--config", help=f"rig config (default {default_config_path()})")
    ap.add_argument("--read-only", action="store_true", help="TUI without any destructive binding")
    ap.add_argument("--demo", action="store_true", help="start a simulated rig, show it, stop it on exit")
    ap.add_argument("--keymap", metavar="FILE", help="rebind keys by binding id (default "
                    "$XDG_CONFIG_HOME/carla-console/keymap.yaml when it exists; README lists the ids)")
    sub = ap.add_subparsers(dest="command")

    sub.add_parser("check-config", help="validate the config (exit 0 valid, 2 invalid)")
    p = sub.add_parser("status", help="one snapshot of every side")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-rpc", action="store_true", help="skip the carla-client probe (faster, less certain)")

    p = sub.add_parser("ports", help="winNAT exclusion scan and planned-port check")
    p.add_argument("--netsh-file", help="read the exclusion table from this file instead of the host")
    p.add_argument("--json", action="store_true")

    for name, helptext in (("launch", "start the side's harness"), ("recover", "guided recovery of a hung side")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("side")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--json", action="store_true")
        p.add_argument("--yes", action="store_true", help="confirm (never overrides UNKNOWN)")
    p = sub.add_parser("preflight", help="check each side's env, versions, imports, GPU and resources")
    p.add_argument("side", nargs="?")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("adapter", help="adapter polling")
    p.add_argument("side")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("reclaim", help="stop an IDLE side's server")
    p.add_argument("side")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("stop", help="stop a side's run (harness, wrapper, evaluator); the server is kept")
    p.add_argument("side")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("restart-server", help="restart a HUNG or DEAD server (measures first)")
    p.add_argument("side")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("notify-test", help="send one test message to every notify: URL")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("retired", help="routes the supervisor retired (quarantine); --put-back ROUTE")
    p.add_argument("side", nargs="?")
    p.add_argument("--put-back", metavar="ROUTE")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("adopt", help="a new supervisor for a running evaluator whose harness died")
    p.add_argument("side")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("harness", help="(internal) the detached supervisor of one side's run")
    p.add_argument("side")
    p.add_argument("--adopt", action="store_true", help="watch the side's running evaluator, continuing its state")
    p.add_argument("--as-host", metavar="HOST", help="it runs on the rig's host HOST (started there over ssh)")
    p = sub.add_parser("job-run", help="(internal) a side's SLURM job on its node")
    p.add_argument("side", help="the side, or @FILE: a job array's sides, indexed by SLURM_ARRAY_TASK_ID")
    p = sub.add_parser("jobs", help="the sides as the rig's engine runs them; --keep requeues lost jobs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true", help="apply the requeue policy (slurm.requeue_budget)")
    p.add_argument("--watch", type=float, default=0.0, metavar="S", help="repeat every S seconds")

    from console.cli import compare, results, split
    for planning in (results, compare, split):
        planning.add_parser(sub)

    sim = sub.add_parser("sim", help="the simulated rig")
    ssub = sim.add_subparsers(dest="sim_command", required=True)
    p = ssub.add_parser("up")
    p.add_argument("--dir", required=True)
    p.add_argument("--no-evaluators", action="store_true", help="start only the servers")
    p.add_argument("--sides", type=int, default=2, metavar="N", help="N sides (A..Z, then s01..)")
    p.add_argument("--engine", choices=["process", "slurm"], default="process",
                   help="slurm: the sides run as one job array on the cluster SLURM_CONF names")
    p.add_argument("--throttle", type=int, default=0, metavar="K", help="slurm: at most K array tasks at once")
    p.add_argument("--remote", action="store_true",
                   help="the sides run on ssh hosts (remote, or remote1..N): each a network namespace with "
                        "its own sshd where root allows, else an sshd on 127.0.0.1; own host keys and known_hosts; "
                        "each side's supervisor runs on its host")
    p.add_argument("--hosts", type=int, default=1, metavar="N", help="--remote: N hosts, sides dealt round robin")
    p.add_argument("--route-s", type=float, metavar="S", help="seconds a simulated route takes (default 3: "
                   "a side finishes in about 30 s; 60 gives ten minutes to practise on)")
    p.add_argument("--server-mode", choices=["external", "evaluator"], default="external",
                   help="external: the sim starts the servers, evaluators patched (B2D_EXTERNAL_SERVER=1, the "
                        "default); evaluator: unpatched evaluators start their own (server.managed_by_evaluator)")
    p = ssub.add_parser("down")
    p.add_argument("--dir", required=True)
    p = ssub.add_parser("inject")
    p.add_argument("--dir", required=True)
    p.add_argument("side")
    p.add_argument("fault", choices=["hang", "crash", "finish", "agent-setup", "server-crash", "server-hang"],
                   help="hang: the evaluator stays alive and stops writing; crash: it exits non-zero mid-route; "
                        "finish: it completes its routes (the server stays up: IDLE); server-crash: SIGKILL "
                        "to the server; server-hang: the server keeps its ports but stops answering RPC; agent-setup: the next "
                        "route's agent cannot be set up (exit 255)")
    return ap


def _load(args: argparse.Namespace) -> RigConfig:
    return load_config(args.config or default_config_path())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    use_pidfd_child_watcher()
    try:
        return _dispatch(args)
    except ConfigError as e:
        print(f"carla-console: config error\n{e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    cmd = args.command
    if cmd == "sim":
        from console.cli import sim
        return sim.run(args)
    if cmd is None:
        from console.tui import backend
        return backend.run(args)
    if cmd == "results":
        from console.cli import results
        return results.run(args, lambda: _load(args))
    if cmd in ("compare", "split"):
        import importlib
        return importlib.import_module(f"console.cli.{cmd}").run(args)
    if cmd == "check-config":
        rig = _load(args)
        for w in rig.warnings:
            print(f"warning: {w}")
        print(f"{rig.path}: ok ({_count(len(rig.sides), 'side')}, {_count(len(rig.hosts), 'host')})")
        return EXIT_OK
    rig = _load(args)
    if cmd == "status":
        from console.cli import status
        return asyncio.run(status.run(rig, as_json=args.json, rpc=not args.no_rpc))
    if cmd in ("ports", "launch", "recover", "adapter", "reclaim", "harness", "job-run", "jobs", "preflight", "stop",
               "restart-server", "notify-test", "adopt", "retired"):
        import importlib
        return importlib.import_module(f"console.cli.{cmd.replace('-', '_')}").run(rig, args)
    print(f"carla-console: unknown command {cmd}", file=sys.stderr)
    return EXIT_USAGE



