"""Benchmark: the console's idle CPU on a running sim rig, against a trivial Textual app, side by side.

Three programs run at the same time, each in its own tmux server at 120x40, over the same window:
- the console: the real entry point (`carla-console -c RIG`) on a two-side sim rig whose evaluators run
  through the whole window, polling every 1 s;
- the yardstick: bench/trivial_app.py, a Textual app that repaints 20 lines once a second (public API);
- htop -d 10 (a 1 s refresh), for reference.
CPU comes from /proc/PID/stat over the window: each process's own utime+stime, and the console's reaped
children (cutime+cstime: the probes it runs as subprocesses, e.g. the carla RPC probe in the side's conda
env, nvidia-smi). The target (issue 18, as corrected): console (own + children) <= 1.5x the trivial app.

    python bench/idle.py [--seconds 60] [--warmup 5] [--checkout DIR] [--variant real|no-poll|ops-only] [--trace F]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ENTRY,
    Tmux,
    become_subreaper,
    cpu_times,
    machine_line,
    routes_for,
    rss_mb,
    sim_rig,
    verdict,
)

W, H = 120, 40
STEP = re.compile(r"step (\d+)")
TARGET = 1.5
TRIVIAL = Path(__file__).with_name("trivial_app.py")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--variant", choices=["real", "no-poll", "ops-only"], default="real",
                    help="real: the entry point (the target); others: bench/console_variant.py, to attribute "
                         "the cost")
    ap.add_argument("--checkout", metavar="DIR", help="run the console of another checkout (another commit) "
                    "with this one's Python, for a comparison in the same round; its rig is this one's sim")
    ap.add_argument("--trace", metavar="FILE", help="attribution: `strace -f -e execve` on the console over the "
                    "window, into FILE (the probe programs it ran); the figures then include strace's own cost")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    htop = shutil.which("htop")
    with sim_rig(routes=routes_for(a.warmup + a.seconds + 60)) as rig_yaml:
        console, trivial = Tmux("idle-console", W, H), Tmux("idle-trivial", W, H)
        ref = Tmux("idle-htop", W, H) if htop else None
        try:
            if a.checkout:
                # Its directory first on sys.path: the imports are that checkout's, not this one's.
                argv = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                        "from console.cli.main import main; sys.argv[0] = 'carla-console'; sys.exit(main())",
                        str(Path(a.checkout).resolve()), "-c", str(rig_yaml)]
                print(f"checkout: {Path(a.checkout).resolve()}")
            elif a.variant == "real":
                argv = [str(ENTRY), "-c", str(rig_yaml)]
            else:
                argv = [sys.executable, str(Path(__file__).with_name("console_variant.py")), a.variant, str(rig_yaml)]
            env = ["env", "-u", "COLUMNS", "-u", "LINES"]
            pid = console.start([*env, *argv])
            tpid = trivial.start([*env, sys.executable, str(TRIVIAL)])
            hpid = ref.start([*env, htop, "-d", "10"]) if ref is not None else None
            ready = {"no-poll": lambda s: s.count("server …") >= 2,
                     "ops-only": lambda s: "first polls done" in s}.get(
                a.variant, lambda s: s.count("server ALIVE") >= 2 and s.count("FRESH") >= 2)
            console.wait(ready, 60, f"the {a.variant} console ready")
            trivial.wait(lambda s: "tick 2" in s, 30, "the trivial app ready")
            time.sleep(a.warmup)
            screens = [console.screen()]
            pids = {"console": pid, "trivial": tpid, **({"htop": hpid} if hpid else {})}
            tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=execve", "-o", a.trace, "-p", str(pid)],
                                      stdin=subprocess.DEVNULL) if a.trace else None
            t0 = {k: cpu_times(p) for k, p in pids.items()}
            deadline = time.monotonic() + a.seconds
            while time.monotonic() < deadline:   # look at the screen a few times only
                time.sleep(min(15.0, max(0.0, deadline - time.monotonic())))
                try:
                    screens.append(console.screen())
                except subprocess.SubprocessError:   # a loaded machine: tmux answers late; the CPU figures stand
                    pass
            t1 = {k: cpu_times(p) for k, p in pids.items()}
            if tracer is not None:
                tracer.terminate()
                tracer.wait()
            wall = t1["console"].at - t0["console"].at
            pct = {k: (t1[k].own - t0[k].own) / wall * 100 for k in pids}
            kids = (t1["console"].children - t0["console"].children) / wall * 100
            total = pct["console"] + kids
            alive = sum(s.count("server ALIVE") for s in screens)
            running = screens[-1].count("eval   ALIVE running")   # the panes' lines, not the event log's
            print(f"variant: {a.variant} ({' '.join(Path(x).name for x in argv)})")
            print(f"window: {wall:.1f} s after {a.warmup:g} s warm-up, the three side by side at {W}x{H}; "
                  f"console RSS {rss_mb(pid):.1f} MiB")
            print(f"console process (utime+stime)         {pct['console']:5.2f} % of one core")
            print(f"console's reaped children (probes)    {kids:5.2f} % of one core")
            print(f"console + children                    {total:5.2f} % of one core")
            print(f"trivial Textual app (20 lines, 1 Hz)  {pct['trivial']:5.2f} % of one core")
            if "htop" in pct:
                print(f"htop -d 10 (reference)                {pct['htop']:5.2f} % of one core")
            else:
                print("htop: not installed (apt-get install htop), no reference")
            ratio = total / pct["trivial"] if pct["trivial"] > 0 else float("inf")
            print(f"console / trivial app: {ratio:.2f}x (console process alone: "
                  f"{pct['console'] / pct['trivial'] if pct['trivial'] > 0 else float('inf'):.2f}x)")
            if "htop" in pct and pct["htop"] > 0:
                print(f"console / htop: {total / pct['htop']:.2f}x (for reference)")
            print(f"rendering: {len(screens)} screens looked at, 'server ALIVE' {alive} times; "
                  f"evaluators running at the end of the window: {running} of 2")
            if a.variant != "real":
                print(f"idle ({a.variant} variant, for attribution): {total:.2f} % against {pct['trivial']:.2f} %")
                return 0
            print(f"idle: console {total:.2f} % of one core against the trivial app's {pct['trivial']:.2f} %: "
                  f"{ratio:.2f}x, target <= {TARGET}x: {verdict(ratio <= TARGET)}")
            return 0
        finally:
            for t in (console, trivial, ref):
                if t is not None:
                    t.stop()


if __name__ == "__main__":
    sys.exit(main())
