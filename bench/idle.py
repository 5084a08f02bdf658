"""Benchmark: the TUI's idle cost on a two-side sim rig, polling at 1 s, for 60 s.

The real entry point (`carla-console -c RIG`) runs in tmux at 120x40, so it renders to a terminal.
After a warm-up (first snapshots shown, plus a few seconds), CPU is read from /proc/PID/stat over the
window: the console process alone (utime+stime: the target, <= 1 % of one core) and, separately, its
reaped children (cutime+cstime: the conda RPC probes every rpc_every_s and the nvidia-smi reads every
vram_every_s). `top -b -d 1 -n N` runs beside it in the same window as a reference (its CPU from
wait4's rusage). The tmux server's CPU (drawing the console's output) is shown too, for information.

    python bench/idle.py [--seconds 60] [--warmup 5] [--checkout DIR]
"""
from __future__ import annotations

import argparse
import os
import re
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
    reap_popen,
    routes_for,
    rss_mb,
    sim_rig,
    verdict,
)

W, H = 120, 40
STEP = re.compile(r"step (\d+)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--profile", metavar="FILE", help="also run py-spy on the console over the window "
                    "(collapsed stacks to FILE; the sampling perturbs the CPU figure a little)")
    ap.add_argument("--cprofile", metavar="FILE", help="run the console under cProfile (pstats to FILE, "
                    "written when it quits; inflates the CPU figure: for the breakdown only)")
    ap.add_argument("--variant", choices=["real", "no-poll", "ops-only"], default="real",
                    help="real: the entry point (the target); others: bench/console_variant.py, to "
                         "attribute the cost")
    ap.add_argument("--checkout", metavar="DIR", help="run the console of another checkout (another commit) "
                    "with this one's Python, for a comparison in the same round; its rig is this one's sim")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    # Start-up, readiness and warm-up come before the window: the evaluators must outlast all of it.
    with sim_rig(routes=routes_for(a.warmup + a.seconds + 60)) as rig_yaml:
        tmux = Tmux("idle", W, H)
        top: subprocess.Popen | None = None
        spy: subprocess.Popen | None = None
        try:
            prefix = [sys.executable, "-m", "cProfile", "-o", str(Path(a.cprofile).resolve())] if a.cprofile else []
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
            pid = tmux.start([*prefix, *argv])
            ready = {"no-poll": lambda s: s.count("server …") >= 2,
                     "ops-only": lambda s: "first polls done" in s}.get(
                a.variant, lambda s: s.count("server ALIVE") >= 2 and s.count("FRESH") >= 2)
            tmux.wait(ready, 30, f"the {a.variant} console ready")
            time.sleep(a.warmup)
            screens = [tmux.screen()]
            c0, s0 = cpu_times(pid), cpu_times(tmux.server.pid)
            top = subprocess.Popen(["top", "-b", "-d", "1", "-n", str(a.seconds)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            if a.profile:
                spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid),
                                        "-d", str(a.seconds), "-r", "50", "-f", "raw", "-o", a.profile,
                                        "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            # Look at the screen a few times only (capture-pane costs the tmux server, not the console).
            deadline = time.monotonic() + a.seconds
            while time.monotonic() < deadline:
                time.sleep(min(15.0, max(0.0, deadline - time.monotonic())))
                screens.append(tmux.screen())
            c1, s1 = cpu_times(pid), cpu_times(tmux.server.pid)
            _, status, ru = os.wait4(top.pid, 0)
            top.returncode = os.waitstatus_to_exitcode(status)
            top_cpu = ru.ru_utime + ru.ru_stime
            rss = rss_mb(pid)
            wall = c1.at - c0.at
            own = (c1.own - c0.own) / wall * 100
            kids = (c1.children - c0.children) / wall * 100
            steps = [sorted(int(x) for x in STEP.findall(s)) for s in screens]
            alive = sum(s.count("server ALIVE") for s in screens)
            running = screens[-1].count("ALIVE running")
            print(f"variant: {a.variant} ({' '.join(Path(x).name for x in argv)})")
            print(f"window: {wall:.1f} s after {a.warmup:g} s warm-up; console pid {pid}, RSS {rss:.1f} MiB")
            print(f"console process (utime+stime)      {c1.own - c0.own:6.2f} s CPU = {own:5.2f} % of one core "
                  f"(user {c1.utime - c0.utime:.2f} s, sys {c1.stime - c0.stime:.2f} s)")
            print(f"console's reaped children          {c1.children - c0.children:6.2f} s CPU = {kids:5.2f} % of one core "
                  f"(conda RPC probes, nvidia-smi)")
            print(f"console + children                 {kids + own:5.2f} % of one core")
            print(f"top -b -d 1 -n {a.seconds} (reference)         {top_cpu:6.2f} s CPU = {top_cpu / wall * 100:5.2f} % of one core")
            print(f"tmux server (draws the console)    {s1.own - s0.own:6.2f} s CPU = {(s1.own - s0.own) / wall * 100:5.2f} % of one core")
            print(f"console / top: {own / (top_cpu / wall * 100):.2f}x")
            print(f"rendering: {len(screens)} screens looked at, 'server ALIVE' {alive} times; "
                  f"log-tail steps seen {[s[-1] if s else None for s in steps]}; "
                  f"evaluators running at the end of the window: {running} of 2")
            if a.cprofile:   # quit with the key, so cProfile writes its file on the way out
                tmux.keys("C-q")   # ctrl+q: the "q" binding does not quit (see the report)
                tmux.wait_dead(20)
            ok = own <= 1.0
            if a.variant != "real":
                print(f"idle ({a.variant} variant, for attribution): console {own:.2f} % of one core, children {kids:.2f} %")
                return 0
            print(f"idle: console {own:.2f} % of one core (children {kids:.2f} %, top {top_cpu / wall * 100:.2f} %), "
                  f"target <= 1 %: {verdict(ok)}")
            return 0
        finally:
            if top is not None and top.returncode is None:
                reap_popen(top)
            if spy is not None:
                try:
                    spy.wait(30)   # it stops itself after the window and writes the file
                except subprocess.TimeoutExpired:
                    reap_popen(spy)
            tmux.stop()


if __name__ == "__main__":
    sys.exit(main())
