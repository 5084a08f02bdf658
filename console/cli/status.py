"""`status [--json]`: one snapshot of every side, as an aligned table or JSON (design.md §3)."""
from __future__ import annotations

import time

from console.cli.exits import EXIT_OK, print_json
from ops.model import RigConfig
from ops.probes.resources import resources_now
from ops.probes.supervised_server import with_supervisor_measure
from ops.results import live as results_lines
from ops.rig import open_rig


async def run(rig: RigConfig, as_json: bool, rpc: bool = True) -> int:
    jobs: dict[str, dict] = {}
    async with open_rig(rig) as live:
        if rig.engine != "process":
            from ops.engines import engine_for
            obs = await engine_for(rig, live.hosts).observe(live)
            jobs = {s: r.to_json() for s, r in obs.runs.items()}
        snaps = await live.prober.all(rpc=rpc)
        # One probe cannot measure HUNG (K probes over T s): show what the side's supervisor measured.
        now = time.time()
        snaps = {n: with_supervisor_measure(s, now) for n, s in snaps.items()}
        res = await resources_now(live, snaps)
    rig_eta = results_lines.rig_eta_json(snaps)
    if as_json:
        out = {n: s.to_json() for n, s in snaps.items()}
        for n, j in jobs.items():   # SLURM sides (design.md §3): the job's id and state, and its evidence
            job = j.get("job") or {}
            out[n]["job"] = {"id": job.get("display_id"), "state": j["word"], "verdict": j["state"],
                             "node": j["where"], "submit_time": job.get("submit_time"),
                             "restarts": job.get("restarts"), "evidence": j["evidence"]}
        print_json({"rig": rig.name, "engine": rig.engine, "sides": out, "eta": rig_eta,
                    "resources": res.to_json()})
        return EXIT_OK
    rows = [("SIDE", "LIFECYCLE", "SERVER", "PID", "ADAPTER", "PORTS", "VRAM", "HEARTBEAT", "EVALUATOR", "PROGRESS", "DS", "IDLE")]
    for name, s in snaps.items():
        j = s.to_json()
        v = j["vram"]
        vram = "?" if v["used_mb"] is None else f"{v['used_mb']}/{v['total_mb'] or '?'}"
        hb = j["heartbeat"]
        # The age only where it means something: a side that is not running has a quiet log by nature.
        age = "" if hb["age_s"] is None or hb["state"] == "OFF" else f" {hb['age_s']:.0f}s"
        ev = j["evaluator"]
        prog = "?" if ev["progress"] is None else f"{ev['progress'][0]}/{ev['progress'][1]}"
        ports = j["server"]["ports"]
        tm = ev["tm"]
        drift = f"->{','.join(map(str, tm['listening']))}!" if tm["drift"] else ""
        rows.append((name, j["lifecycle"], j["server"]["state"], str(j["server"]["pid"] or "-"), str(j["server"]["adapter"]
                     if j["server"]["adapter"] is not None else "-"),
                     f"{ports['rpc']}-{ports['secondary']}/tm{ports['tm']}{drift}", vram, hb["state"] + age,
                     f"{ev['state']} {ev['phase']}", prog, "-" if ev["ds"] is None else f"{ev['ds']:.1f}",
                     "IDLE" if j["idle"] else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for w in res.warnings():
        print(f"warning: {w}")
    for name, s in snaps.items():
        print(f"{name}: {s.lifecycle.value} — {s.life.reason}")
        if s.results is not None:
            print(f"{name}: {results_lines.pane_line(s.results)}")
            if s.results.fake.flagged:
                print(f"{name}: FAKE SUCCESS? {s.results.fake.message}")
    if rig_eta["eta_s"] is not None:
        print(f"rig: ETA {results_lines.hours(rig_eta['eta_s'])} (slowest side; rests on {rig_eta['rests_on']} routes)")
    for name, s in snaps.items():
        tm = s.to_json()["evaluator"]["tm"]
        if tm["drift"]:
            print(f"{name}: TM port drift: the evaluator listens on {tm['listening']}, not on the planned "
                  f"{tm['planned']} (Bench2Drive moves to the next free TM port without a word: another "
                  "TrafficManager holds it)")
        if s.server.verdict.state.value == "UNKNOWN":
            print(f"{name}: server UNKNOWN — {s.server.verdict.summary}")
        elif s.server.verdict.state.value == "HUNG":
            print(f"{name}: server HUNG — {s.server.verdict.summary}")
            for ev in s.server.verdict.evidence[:1]:
                print(f"{name}:   {ev.detail}")
    return EXIT_OK
