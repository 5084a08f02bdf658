"""How long a healthy side's preflight takes (issue 21: under 10 s), on the sim rig.

    .venv/bin/python bench/preflight.py [--runs N]

Prints, per run, the preflight's own time (conda start, `import carla` and a version RPC, the agent import,
torch's devices: what ops/scripts/preflight.py does in the side's env, with the GPU and disk readings
alongside) and the whole `carla-console preflight A --json` command (interpreter start and the rig's
probes on top), then the medians against the 10 s target. Figures, not assertions: the machine's load is
printed with them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ENTRY, machine_line, sim_rig, verdict  # noqa: E402

TARGET_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    print(machine_line())
    inner, whole = [], []
    with sim_rig(sides=("A",), start_evaluators=False) as rig_yaml:
        for i in range(a.runs):
            t0 = time.perf_counter()
            out = subprocess.run([str(ENTRY), "-c", str(rig_yaml), "preflight", "A", "--json"], capture_output=True,
                                 text=True, timeout=120)
            wall = time.perf_counter() - t0
            rep = json.loads(out.stdout)["sides"]["A"]
            inner.append(rep["took_ms"] / 1e3)
            whole.append(wall)
            print(f"run {i + 1}: preflight {rep['took_ms'] / 1e3:.2f} s ({rep['verdict']}), "
                  f"whole command {wall:.2f} s, exit {out.returncode}")
    med_in, med_all = statistics.median(inner), statistics.median(whole)
    print(f"median preflight {med_in:.2f} s = {med_in / TARGET_S:.2f} of the {TARGET_S:.0f} s target "
          f"({verdict(med_in < TARGET_S)}); whole command {med_all:.2f} s = {med_all / TARGET_S:.2f} "
          f"({verdict(med_all < TARGET_S)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
