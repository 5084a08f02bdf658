"""Benchmark: start-up. `carla-console --demo` to first frame, and `status --json` on a sim rig.

--demo runs in tmux at 120x40; the clock starts just before `tmux new-session` and stops at the first
`capture-pane` that shows both side panes (first frame) and then both panes with a live snapshot
(first SideSnapshot shown). The demo draws its first frame while its sim servers are still starting;
the second figure waits for both servers to answer, which is what an operator waits for next.
ctrl+q ends each run (the screen's `q` binding names an action the screen lacks); the demo stops its
rig itself. For reference, the first frame of `-c rig.yaml` on a rig that is already running (the
operator's usual case) is measured too.

The screen is captured every CAPTURE_EVERY_S. Each capture is a tmux client process: at 5 ms the
benchmark's own polling took about half of one of this machine's two cores, and slowed the very start
it measured. 20 ms costs a tenth of that, and is the figures' resolution.

status --json: wall time of the CLI subprocess on a two-side sim rig; `--no-rpc` (no carla-client probe
through the fake conda) and a bare `python -c pass` / the CLI's imports as reference figures.
`--profile` adds a pyinstrument report of one `status --json`, to say where the time goes.

    python bench/startup.py [--runs 3] [--profile]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ENTRY, ROOT, Tmux, become_subreaper, machine_line, sim_rig, verdict  # noqa: E402

W, H = 120, 40


CAPTURE_EVERY_S = 0.02


def panes_drawn(s: str) -> bool:
    return any(m in s for m in ("═ A ═", "─ A ─")) and any(m in s for m in ("═ B ═", "─ B ─"))


def demo_once(i: int, argv: list[str] | None = None) -> tuple[float, float]:
    tmux = Tmux(f"start{i}", W, H)
    try:
        t0 = time.perf_counter()
        tmux.start(argv or [str(ENTRY), "--demo"])
        tmux.wait(panes_drawn, 30, "the side panes", every=CAPTURE_EVERY_S)
        t_frame = time.perf_counter() - t0
        tmux.wait(lambda s: s.count("server ALIVE") >= 2, 30, "both snapshots", every=CAPTURE_EVERY_S)
        t_snap = time.perf_counter() - t0
        tmux.keys("C-q")   # ctrl+q: the "q" binding does not quit (see the report)
        if not tmux.wait_dead(30):
            raise TimeoutError("the demo did not exit within 30 s of q")
        return t_frame, t_snap
    finally:
        tmux.stop()


def wall(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=60, cwd=ROOT)
        out.append(time.perf_counter() - t0)
    return out


def fmt(v: list[float]) -> str:
    return f"median {statistics.median(v) * 1e3:7.0f} ms  (runs: {', '.join(f'{x * 1e3:.0f}' for x in v)})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    # An installed console runs from bytecode: pip compiles it on install, and an editable install
    # writes it on the first run. Where PYTHONDONTWRITEBYTECODE is set (this sandbox sets it), every
    # start would compile ~100 modules from source instead. Compile once, as a second start finds them.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "console", "widgets", "ops"], cwd=ROOT,
                   check=True, capture_output=True, timeout=120)
    print(f"bytecode: compiled first (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})")
    demo = [demo_once(i) for i in range(a.runs)]
    frames = [f for f, _ in demo]
    snaps = [s for _, s in demo]
    print(f"--demo to first frame (panes drawn)      {fmt(frames)}")
    print(f"--demo to first snapshot shown (A and B) {fmt(snaps)}")

    with sim_rig() as rig_yaml:
        on_rig = [demo_once(100 + i, [str(ENTRY), "-c", str(rig_yaml)]) for i in range(a.runs)]
        print(f"-c rig.yaml, rig running: first frame     {fmt([f for f, _ in on_rig])}  (reference)")
        print(f"-c rig.yaml, rig running: both snapshots  {fmt([s for _, s in on_rig])}  (reference)")
        base = [str(ENTRY), "-c", str(rig_yaml), "status", "--json"]
        wall(base, 1)   # warm the page cache and the fakes once
        runs = max(5, a.runs)
        st = wall(base, runs)
        st_norpc = wall(base + ["--no-rpc"], runs)
        py = wall([sys.executable, "-c", "pass"], runs)
        imp = wall([sys.executable, "-c", "import console.cli.main, console.cli.status, ops.rig, ops.probes.prober"], runs)
        print(f"status --json                            {fmt(st)}")
        print(f"status --json --no-rpc (reference)       {fmt(st_norpc)}")
        print(f"python -c pass (reference)               {fmt(py)}")
        print(f"python -c 'import console.cli.main, …' (ref.) {fmt(imp)}")
        if a.profile:
            prof = ROOT / ".bench-status.pyinstrument.txt"
            subprocess.run([str(Path(sys.executable).with_name("pyinstrument")), "-r", "text",
                            "-o", str(prof), str(ENTRY), *base[1:]], check=True, capture_output=True, timeout=60)
            text = prof.read_text()
            prof.unlink()
            print("pyinstrument, one status --json:")
            print("\n".join(text.splitlines()[:45]))
    f, s = statistics.median(frames), statistics.median(st)
    print(f"startup: --demo first frame {f * 1e3:.0f} ms (target <= 1500: {verdict(f <= 1.5)}), "
          f"status --json {s * 1e3:.0f} ms (target <= 1000: {verdict(s <= 1.0)}); "
          f"both: {verdict(f <= 1.5 and s <= 1.0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
