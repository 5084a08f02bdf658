"""`sim up|down|inject --dir D`: the simulated rig of sim (design.md §5).

`up` starts the fake servers, then starts each side the way an operator would: through the rig's engine
(ops/engines): for the process engine launch's plan and the guard under a detached harness; for
`--engine slurm` one job array on the cluster SLURM_CONF names, each task starting its side's server and
harness on its node. So the demo and a later console see real harnesses, jobs, attempts and audit lines.
`down` cancels a SLURM rig's jobs (through the guard, by exact job id) before it stops the rest.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_USAGE

JOBS_RUNNING_S = 180.0     # a busy cluster may hold the array a while; sim up waits this long at most


async def start_sides(rig_yaml: Path, wait_running_s: float = 0.0) -> list[str]:
    """Start every side through the rig's engine. Returns problems (refusals, failures)."""
    from ops.actions.guard import Confirmation
    from ops.config import load_config
    from ops.engines import engine_for
    from ops.rig import open_rig

    rig = load_config(rig_yaml)
    async with open_rig(rig) as live:
        engine = engine_for(rig, live.hosts)
        started = await engine.start(live, list(rig.sides), Confirmation(True, "sim"))
        problems = [f"{s.side}: {s.refused or s.detail}" for s in started if not s.ok]
        if problems or not wait_running_s:
            return problems
        return await _wait_jobs_running(rig, wait_running_s)


async def _wait_jobs_running(rig, within: float) -> list[str]:
    """Until as many sides as the array's throttle lets run have started their run on their node (their
    job.json says running, or already ended): the others wait in the queue, as SLURM intends."""
    from ops.engines.overlay import read_job_record
    k = rig.slurm.array_throttle if rig.slurm else 0
    want = min(len(rig.sides), k or len(rig.sides))
    deadline = time.monotonic() + within
    while True:
        started = [s for s in rig.sides if (read_job_record(rig, s) or {}).get("status") in ("running", "ended")]
        if len(started) >= want:
            return []
        if time.monotonic() >= deadline:
            waiting = [s for s in rig.sides if s not in started]
            return [f"{len(started)} of the {want} sides expected running after {within:.0f} s "
                    f"(waiting: {', '.join(waiting[:8])}{' ...' if len(waiting) > 8 else ''})"]
        await asyncio.sleep(0.25)


def up_with_harnesses(d: Path, sides: list[str] | None = None, route_s: float | None = None,
                      remote: bool = False, hosts: int = 1) -> Path:
    from sim import rig as sim

    kw: dict[str, Any] = {"route_s": sim.ROUTE_S if route_s is None else route_s, "remote": remote, "hosts": hosts}
    if sides:
        kw["sides"] = sides
    path = Path(sim.up(d, start_evaluators=False, **kw))
    problems = asyncio.run(start_sides(path))
    if problems:
        sim.down(d)
        raise RuntimeError("the sim rig's sides did not launch: " + "; ".join(problems))
    return path


def up_slurm(d: Path, sides: list[str], throttle: int = 0, **rig_kw: Any) -> Path:
    from sim import slurm_rig

    path = slurm_rig.up(d, sides=sides, throttle=throttle, **rig_kw)
    problems = asyncio.run(start_sides(path, wait_running_s=JOBS_RUNNING_S))
    if problems:
        down(d)
        raise RuntimeError("the sim rig's jobs did not start: " + "; ".join(problems))
    return path


async def stop_jobs(rig_yaml: Path) -> list[str]:
    """Cancel every live job of a SLURM sim rig through the guard; then squeue must hold none of them."""
    from ops.actions.guard import Confirmation
    from ops.config import load_config
    from ops.engines import engine_for
    from ops.rig import open_rig
    from ops.tristate import State

    rig = load_config(rig_yaml)
    if rig.engine != "slurm":
        return []
    async with open_rig(rig) as live:
        engine = engine_for(rig, live.hosts)
        outcomes = await engine.stop_all(live, Confirmation(True, "sim"))
        problems = [f"{o.plan.side}: {o.refused or o.detail}" for o in outcomes if not o.ok]
        obs = await engine.observe(live)
        left = [s for s, r in obs.runs.items() if r.state is not State.DEAD]
        if obs.evidence.error:
            problems.append(f"squeue UNKNOWN after the cancels: {obs.evidence.error}")
        elif left:
            problems.append(f"jobs still live for {', '.join(left)}")
        return problems


def down(d: Path) -> Any:
    from sim import rig as sim

    problems: list[str] = []
    if (d / "rig.yaml").exists():
        from ops.config import ConfigError
        try:
            problems = asyncio.run(stop_jobs(d / "rig.yaml"))
        except ConfigError:
            pass   # not a rig the console can read: the sim's own records still stop what it started
    report = sim.down(d)
    if problems:
        raise RuntimeError("sim down: " + "; ".join(problems))
    return report


FAULT_TAKEN_S = 5.0   # an evaluator reads its fault file within a tick (0.5 s in the sim)


def _taken(path: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not path.exists():
            return True
        time.sleep(0.1)
    return not path.exists()


def run(args: argparse.Namespace) -> int:
    from sim import rig as sim
    from sim.layout import SimLayout
    from sim.slurm_rig import side_names

    d = Path(args.dir).expanduser().resolve()
    try:
        if args.sim_command == "up":
            n = getattr(args, "sides", 2)
            if n < 1:
                raise ValueError(f"--sides must be at least 1, got {n}")
            names = side_names(n)
            used = SimLayout.of(d).sides_json.exists()
            if getattr(args, "engine", "process") == "slurm":
                print(up_slurm(d, names, throttle=args.throttle))
            elif args.no_evaluators or getattr(args, "server_mode", "external") == "evaluator":
                print(sim.up(d, sides=names, start_evaluators=False,
                             server_mode=getattr(args, "server_mode", "external"),
                             remote=getattr(args, "remote", False), hosts=getattr(args, "hosts", 1)))
            else:
                print(up_with_harnesses(d, names, getattr(args, "route_s", None), getattr(args, "remote", False),
                                        getattr(args, "hosts", 1)))
            if used:
                print(f"{d} held an earlier sim rig: its checkpoints are kept, so its sides resume where "
                      f"they stopped (for a fresh run: sim down, then remove {d})", file=sys.stderr)
        elif args.sim_command == "down":
            if not SimLayout.of(d).sides_json.exists():
                print(f"carla-console sim down: no sim rig in {d} (nothing was stopped)", file=sys.stderr)
                return EXIT_FINDING
            report = down(d)
            print(f"sim down {d}: {len(report.terminated)} terminated, {len(report.killed)} killed"
                  + (f", {len(report.survivors)} STILL ALIVE" if report.survivors else ""))
        elif args.sim_command == "inject":
            inj = sim.inject(d, args.side, args.fault)
            print(f"sim inject {args.side} {args.fault}: {inj.detail}")
            if args.fault in sim.EVALUATOR_FAULTS:
                path = SimLayout.of(d).fault_file(args.side)
                if not _taken(path, FAULT_TAKEN_S):
                    path.unlink(missing_ok=True)   # a later evaluator must not take a fault meant for now
                    print(f"carla-console sim inject: no evaluator of side {args.side} took the fault within "
                          f"{FAULT_TAKEN_S:.0f} s (is it running?): no effect, the fault file is removed",
                          file=sys.stderr)
                    return EXIT_FINDING
                print(f"sim inject {args.side} {args.fault}: the evaluator took it")
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"carla-console sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
