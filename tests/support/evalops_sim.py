"""Shared pieces of the evaluator-operations tests (resume, harness, recover) on the sim rig.

The sim rig is started without evaluators, so every run goes through `launch` and a real harness. The
teardown stops exactly what the tests started: each side's harness by the (pid, create_time) its
harness.json names, plus any process carrying this rig's exact harness tokens (`-c RIG harness SIDE`,
the rig path being unique to the test), then `sim down` for the recorded sim processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from ops.platform.procs import read_proc
from sim import rig as sim
from sim.procs import stop_family

REPO = Path(__file__).resolve().parents[2]


def cli(rig_yaml: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", "-c", str(rig_yaml), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def wait_until(pred: Callable[[], object], timeout: float, every: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got or time.monotonic() >= deadline:
            return got
        time.sleep(every)


def harness_state(d: Path, side: str) -> dict | None:
    try:
        return json.loads((d / "state" / "sides" / side / "harness.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def checkpoint(d: Path, side: str) -> dict | None:
    try:
        return json.loads((d / "work" / side / "results" / "result.json").read_text())
    except (FileNotFoundError, ValueError):
        return None   # absent, or caught half-written: the caller polls again


def done_records(cp: dict | None) -> list[dict]:
    if not cp:
        return []
    return [r for r in cp["_checkpoint"]["records"] if r.get("status") != "Started"]


def sides(d: Path) -> dict:
    return json.loads((d / "sim" / "sides.json").read_text())["sides"]


def alive(pid: int, create_time: float | None = None) -> bool:
    p = read_proc(pid)
    if p is None or p.state == "Z":
        return False
    return create_time is None or abs(p.create_time - create_time) <= 0.05


def harness_report(d: Path, side: str, pid: int, create_time: float) -> str:
    """Why a harness expected alive is not: what /proc says of its pid, its state file, the tail of its own
    log and of its side's events (a failure message, read only when an assertion fails)."""
    p = read_proc(pid)
    lines = [f"harness {pid} started {create_time:.2f}: /proc says "
             + ("nothing (gone)" if p is None else f"state {p.state}, started {p.create_time:.2f}, {p.cmd_text(160)!r}")]
    side_dir = d / "state" / "sides" / side
    for name, n in (("harness.json", 40), ("harness.log", 30), ("events.jsonl", 15)):
        try:
            text = (side_dir / name).read_text(errors="replace").splitlines()[-n:]
        except OSError as e:
            text = [f"({e})"]
        lines += [f"--- {name}", *text]
    return "\n".join(lines)


def _harness_pids(rig_yaml: Path) -> list[tuple[int, float]]:
    """Processes whose argv holds this rig's harness tokens exactly (never a substring match)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        p = read_proc(int(name))
        if p is None or not p.cmdline or p.state == "Z":
            continue
        argv = p.cmdline
        pairs = list(zip(argv, argv[1:]))
        if ("-c", str(rig_yaml)) in pairs and any(a == "harness" for a, _ in pairs):
            out.append((p.pid, p.create_time))
    return out


def stop_exact(targets: list[tuple[int, float]], grace: float = 3.0) -> None:
    """Stop these processes (pid + create time) and all their descendants. A harness stopped alone would
    orphan an evaluator chain still starting up (conda forwards no signal), which nothing then stops."""
    procs = []
    for pid, ct in targets:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        if alive(pid, ct) and abs(proc.create_time() - ct) <= 0.05:
            procs.append(proc)
    stop_family(procs, grace)


@contextmanager
def sim_rig(d: Path, supervisor: dict | None = None, notify: list[str] | None = None, **kw) -> Iterator[Path]:
    if supervisor is None:
        supervisor = {"auto": False}
    opts = dict(start_evaluators=False, route_s=1.5, routes=10, stall_s=3.0, tick_s=0.3)
    opts.update(kw)
    rig_yaml = sim.up(d, **opts)
    if supervisor is not None:
        # The supervisor's automatic actions are on by default for real rigs; tests of manual recovery and
        # of the plain harness pass supervisor={"auto": False} (sim_rig's default) so nothing acts behind them.
        import yaml
        data = yaml.safe_load(rig_yaml.read_text())
        for side in data["sides"].values():
            side["supervisor"] = dict(supervisor)
        if notify:
            data["notify"] = list(notify)
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield rig_yaml
    finally:
        targets = _harness_pids(rig_yaml)
        for side in sides(d):
            st = harness_state(d, side)
            if st and (st["pid"], st["create_time"]) not in targets:
                targets.append((st["pid"], st["create_time"]))
        # Harnesses first: otherwise one would see its evaluator die in `down` and start another.
        stop_exact(targets)
        sim.down(d)


def write_checkpoint(path: Path, route_ids: list[str], done: int, total: int,
                     entry_status: str = "Started") -> bytes:
    """A Bench2Drive-shaped checkpoint with `done` completed records; returns the bytes written."""
    recs = [{"index": i, "route_id": rid, "scenario_name": "Sim", "weather_id": "1", "save_name": f"s{i}",
             "status": "Completed", "num_infractions": 0,
             "infractions": {k: [] for k in ("collisions_layout", "collisions_pedestrian", "collisions_vehicle",
                                             "red_light", "stop_infraction", "outside_route_lanes",
                                             "min_speed_infractions", "yield_emergency_vehicle_infractions",
                                             "scenario_timeouts", "route_dev", "vehicle_blocked",
                                             "route_timeout")},
             "scores": {"score_route": 100.0, "score_penalty": 1.0, "score_composed": 100.0},
             "meta": {"route_length": 100.0, "duration_game": 10.0, "duration_system": 60.0},
             "town_name": "Town12"} for i, rid in enumerate(route_ids[:done])]
    data = {"_checkpoint": {"global_record": {}, "progress": [done, total], "records": recs},
            "entry_status": entry_status, "eligible": False, "sensors": [], "values": [], "labels": []}
    raw = (json.dumps(data, indent=4) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return raw
