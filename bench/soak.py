"""An unattended soak on the sim (issue 15, "Must show"): two sides, nobody touching them, a random fault
plan injected at random times — evaluator hangs and crashes, server crashes and hangs, agent set-up
failures, and one route that crashes every time — with the supervisor's policy on and notifications going
to a real HTTP endpoint on 127.0.0.1 (apprise `json://`). It prints one line:

    unattended: R routes, F faults, F recovered, Q retired, 0 lost, 0 wrongly touched, MTTR median Xs max Ys

- routes: every route of both sides ends with a record or as retired (`missing` says otherwise);
- recovered: faults after which the side ran again (a new attempt whose log moved) within the bound;
- lost: the largest drop of a side's completed-record count over the run (sampled every poll);
- wrongly touched: bystander processes carrying a side's words (ports as other numbers, the evaluator's
  script name) that died, plus audited targets that were none of the sides' processes (sampled every
  poll: a side's exact tokens, their ancestors below init and their descendants);
- MTTR: fault injected → the side's heartbeat FRESH again on a new attempt.

    python bench/soak.py [--routes 40] [--faults 10] [--seed 1] [--route-s 1.0]
`soak()` is what the short deterministic test (tests/integration/test_soak.py) runs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import yaml  # noqa: E402

from ops.parse.routes import parse_routes  # noqa: E402
from sim import rig as sim  # noqa: E402
from tests.support.evalops_sim import checkpoint, done_records, harness_state, sim_rig  # noqa: E402
from tests.support.http_sink import HttpSink  # noqa: E402

FAULT_KINDS = ("hang", "crash", "server-crash", "server-hang", "agent-setup")
SIDES = ("A", "B")
DONE = ("finished", "gave_up", "refused", "failed")


@dataclass
class Fault:
    side: str
    kind: str
    at: float
    attempt: int
    mttr_s: float | None = None


@dataclass
class SoakResult:
    routes: int
    faults: list[Fault]
    retired: list[str]
    missing: list[str]
    lost: int
    touched: int
    notifications: int
    audit_ops: dict[str, int]
    statuses: dict[str, str]
    wall_s: float
    kinds_seen: list[str] = field(default_factory=list)
    crash_route: str = ""          # the route of side A that crashes every time (A:RouteScenario_<id>_rep0)

    @property
    def recovered(self) -> int:
        return sum(1 for f in self.faults if f.mttr_s is not None)

    def line(self) -> str:
        mttrs = [f.mttr_s for f in self.faults if f.mttr_s is not None]
        med = f"{statistics.median(mttrs):.0f}s" if mttrs else "-"
        mx = f"{max(mttrs):.0f}s" if mttrs else "-"
        return (f"unattended: {self.routes} routes, {len(self.faults)} faults, {self.recovered} recovered, "
                f"{len(self.retired)} retired, {self.lost} lost, {self.touched} wrongly touched, "
                f"MTTR median {med} max {mx}")


def _configure(rig_yaml: Path, sink_url: str, crash_route: str) -> None:
    data = yaml.safe_load(rig_yaml.read_text())
    data["notify"] = [sink_url]
    for name, side in data["sides"].items():
        side["supervisor"] = {"auto": True, "watch_s": 0.5, "max_recoveries": 50, "max_route_recoveries": 5,
                              "server_restarts_per_hour": 30, "quarantine_after": 2, "unknown_wait_s": 120}
        side["server"].update(adapter_candidates=[side["server"].get("adapter", 0) or 0], hung_probes=2,
                              hung_after_s=1.5, probe_timeout_s=1.5)
        side["evaluator"]["max_attempts"] = 200
        if name == "A":
            side["evaluator"]["env"]["SIM_CRASH_ROUTES"] = crash_route
    rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))


def _cli(rig_yaml: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", "-c", str(rig_yaml), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _log_mtime(d: Path, side: str) -> float:
    try:
        return (d / "work" / side / "logs" / "eval.log").stat().st_mtime
    except OSError:
        return 0.0


def _running_again(d: Path, f: Fault) -> bool:
    st = harness_state(d, f.side) or {}
    if st.get("status") in ("finished", "gave_up", "refused", "failed"):
        return st.get("status") == "finished"
    att = st.get("attempts") or []
    if not att or st.get("attempt", 0) <= f.attempt or st.get("status") != "running":
        return False
    return _log_mtime(d, f.side) > att[-1]["started"] + 0.2


def _decoys(rpc_ports: list[int]) -> list[subprocess.Popen]:
    """Bystanders with a side's words in their argv (a port as a longer number, the script's name)."""
    code = "import time\nwhile True: time.sleep(60)"
    out = []
    for port in rpc_ports:
        out.append(subprocess.Popen([sys.executable, "-c", code, "leaderboard_evaluator.py", "--port", f"{port}0",
                                     f"-carla-rpc-port={port}0"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return out


def _side_tokens(argv: list[str], ports: set[str]) -> bool:
    """Exact tokens only: `--port N` or `-carla-rpc-port=N` (a decoy's `N0` is another number)."""
    for i, a in enumerate(argv):
        if a == "--port" and i + 1 < len(argv) and argv[i + 1] in ports:
            return True
        if a.startswith("-carla-rpc-port=") and a.split("=", 1)[1] in ports:
            return True
    return False


def _sides_processes(ports: set[str], seen: dict[int, set[float]]) -> None:
    """Adds every process of the sides now: those carrying a side's exact tokens, their ancestors below
    init (the supervisor, conda's wrapper and its shell, whose argv names only a temp script) and their
    descendants. A target audited later must be one of these, sampled while it lived."""
    procs = {p.pid: p for p in psutil.process_iter(["pid", "ppid", "cmdline", "create_time"])}
    kids: dict[int, list[int]] = {}
    for p in procs.values():
        kids.setdefault(p.info["ppid"] or 0, []).append(p.pid)
    roots = [pid for pid, p in procs.items() if _side_tokens(p.info["cmdline"] or [], ports)]
    mine: set[int] = set()
    for pid in roots:
        up = pid
        while up > 1 and up in procs and up not in mine and up != os.getpid():
            mine.add(up)
            up = procs[up].info["ppid"] or 0
        stack = [pid]
        while stack:
            for k in kids.get(stack.pop(), []):
                if k not in mine:
                    mine.add(k)
                    stack.append(k)
    for pid in mine:
        seen.setdefault(pid, set()).add(procs[pid].info["create_time"] or 0.0)


def _was_owned(seen: dict[int, set[float]], pid: int, create_time: float) -> bool:
    """psutil and the console each compute a start time from boot time and ticks: equal within a tick."""
    return any(abs(ct - create_time) < 0.5 for ct in seen.get(pid, ()))


def _checkpoint_sample(d: Path, side: str) -> dict | None:
    """The side's checkpoint for the lost count: {} when there is none (no record), None when it was caught
    half-written. Bench2Drive writes it in place (truncate, then write), as the sim's evaluator does; a
    loaded machine widens that window, and a half-written read counted as "no records" is no loss."""
    path = d / "work" / side / "results" / "result.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        return None


def soak(d: Path, *, routes: int = 40, n_faults: int = 10, seed: int = 1, route_s: float = 1.0,
         tick_s: float = 0.2, gap_s: tuple[float, float] = (3.0, 8.0), timeout_s: float = 900.0,
         kinds: tuple[str, ...] = FAULT_KINDS, say=print) -> SoakResult:
    rnd = random.Random(seed)
    t0 = time.time()
    with HttpSink() as sink, sim_rig(d, routes=routes, route_s=route_s, tick_s=tick_s, stall_s=3.0,
                                     eval_timeout_s=3.0, supervisor={"auto": True}) as rig_yaml:
        side_info = json.loads((d / "sim" / "sides.json").read_text())["sides"]
        ev = yaml.safe_load(rig_yaml.read_text())["sides"]["A"]["evaluator"]
        ids = parse_routes((Path(ev["cwd"]) / ev["routes"]).read_bytes()).route_ids
        crash_route = ids[min(5, len(ids) - 1)]
        _configure(rig_yaml, sink.url, crash_route)
        decoys = _decoys([int(side_info[s]["rpc_port"]) for s in SIDES])
        try:
            for s in SIDES:
                out = _cli(rig_yaml, "launch", s, "--yes")
                if out.returncode != 0:
                    raise RuntimeError(f"launch {s}: {out.stdout}{out.stderr}")
            # Every kind once first (in a random order, on random sides), then random ones: the sides finish
            # when their routes do, so a kind left to the end of the plan might never land.
            first = [(rnd.choice(SIDES), k) for k in rnd.sample(list(kinds), len(kinds))][:n_faults]
            plan = first + [(rnd.choice(SIDES), rnd.choice(kinds)) for _ in range(n_faults - len(first))]
            faults: list[Fault] = []
            high = {s: 0 for s in SIDES}
            lost = 0
            side_ports = {str(side_info[s]["rpc_port"]) for s in SIDES}
            owned: dict[int, set[float]] = {}
            pending: list[Fault] = []
            next_at = time.time() + rnd.uniform(*gap_s)
            deadline = time.time() + timeout_s
            while time.time() < deadline:
                _sides_processes(side_ports, owned)
                for s in SIDES:
                    cp = _checkpoint_sample(d, s)
                    if cp is None:
                        continue   # caught half-written (the evaluator truncates, then writes): no sample
                    n = len(done_records(cp))
                    if n < high[s]:
                        say(f"  {s}: completed records {high[s]} -> {n} (attempt "
                            f"{(harness_state(d, s) or {}).get('attempt')})")
                    lost = max(lost, high[s] - n)
                    high[s] = max(high[s], n)
                for f in pending:
                    if f.mttr_s is None and _running_again(d, f):
                        f.mttr_s = time.time() - f.at
                        say(f"  {f.side} {f.kind}: running again after {f.mttr_s:.1f} s")
                pending = [f for f in pending if f.mttr_s is None]
                states = {s: (harness_state(d, s) or {}).get("status") for s in SIDES}
                if plan and time.time() >= next_at:
                    side, kind = plan[0]
                    if states[side] in DONE:   # that side is done: the fault lands on one still running
                        side = next((s for s in SIDES if states[s] not in DONE), side)
                    st = harness_state(d, side) or {}
                    busy = any(f.side == side for f in pending)
                    if states[side] == "running" and not busy and _log_mtime(d, side) > time.time() - 1.5:
                        plan.pop(0)
                        f = Fault(side, kind, time.time(), st.get("attempt", 0))
                        sim.inject(d, side, kind)
                        faults.append(f)
                        pending.append(f)
                        say(f"  t+{f.at - t0:5.1f}s inject {kind} on {side} (attempt {f.attempt})")
                        next_at = time.time() + rnd.uniform(*gap_s)
                    elif states[side] in DONE:
                        plan.pop(0)   # every side is done: the fault has nowhere to land
                if all(v in DONE for v in states.values()) and not pending:
                    break
                time.sleep(0.3)
            statuses = {s: (harness_state(d, s) or {}).get("status") or "?" for s in SIDES}
            retired: list[str] = []
            missing: list[str] = []
            all_ids = {f"RouteScenario_{i}_rep0" for i in ids}
            for s in SIDES:
                st = harness_state(d, s) or {}
                retired += [f"{s}:{r}" for r in st.get("retired", [])]
                have = {r["route_id"] for r in done_records(checkpoint(d, s))} | set(st.get("retired", []))
                missing += [f"{s}:{r}" for r in sorted(all_ids - have)]
            touched = sum(1 for p in decoys if p.poll() is not None)
            audit_ops: dict[str, int] = {}
            audit_path = d / "state" / "audit.jsonl"
            for ln in audit_path.read_text().splitlines():
                a = json.loads(ln)
                if a.get("outcome") != "done":
                    continue
                audit_ops[a["operation"]] = audit_ops.get(a["operation"], 0) + 1
                for t in a.get("targets") or []:
                    if not _was_owned(owned, int(t["pid"]), float(t["create_time"])) and not _side_tokens(t.get("cmdline") or [], side_ports):
                        say(f"  wrongly touched? {a['operation']} {t.get('role')} {t['pid']}: {t.get('cmdline')}")
                        touched += 1
            kinds_seen = sorted({m["title"].split(": ", 2)[1].split(" ")[0] for m in sink.snapshot()
                                 if ": " in m["title"]})
            notifications = len(sink.snapshot())
            for s in SIDES:   # leave nothing running: each side's chain through the guard
                _cli(rig_yaml, "stop", s, "--yes")
        finally:
            for p in decoys:
                p.kill()
                p.wait()
    return SoakResult(2 * len(ids), faults, retired, missing, lost, touched, notifications, audit_ops, statuses,
                      time.time() - t0, kinds_seen, f"A:RouteScenario_{crash_route}_rep0")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", type=int, default=40)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--route-s", type=float, default=1.0)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        res = soak(Path(tmp) / "sim", routes=a.routes, n_faults=a.faults, seed=a.seed, route_s=a.route_s,
                   timeout_s=a.timeout_s)
    print(f"sides: {res.statuses}; missing: {res.missing or 'none'}; retired: {res.retired or 'none'}")
    print(f"audit (done): {res.audit_ops}; notifications received: {res.notifications} ({', '.join(res.kinds_seen)})")
    print(f"wall {res.wall_s:.0f} s")
    print(res.line())
    return 0 if not res.missing and res.lost == 0 and res.touched == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
