"""Benchmark: the console at scale. A 2-side rig on one host (the baseline), then N sides (default 32) on
H ssh hosts (default 4: network namespaces, each with its own sshd, `sim up --remote --hosts H`; an sshd on
127.0.0.1 each where namespaces cannot be made), or with `--engine slurm` as SLURM jobs on a one-node
cluster of the benchmark's own (tests/support/slurm.py), and prints one line:

    scale: S sides on H hosts: beat median X ms (2 sides: Y ms), key p99 Z ms, idle W % (trivial Textual app T %, htop V %)

- beat: one poll of every side, as the TUI's backend does it (LiveBackend.probe for each side with the
  TUI's rpc=None, but for the sides whose poll would read nothing on that beat, as the TUI, gathered: the process table and the squeue are shared by the beat; the warm-up beat
  makes the RPC probes, which then follow their cadence), every second for --beats beats once every side
  is served (its evaluator running: up to 120 s of polling first); the median.
  Target: X / Y <= 8 for 16x the sides (sublinear).
- key p99: the console runs in tmux (80x24) on the N-side rig; `down` moves the table's selection; the time
  from send-keys until the detail pane's title names the next side, over --keys presses (200: of 40 the
  p99 is the slowest one, whatever the machine did then). Target <= 100 ms.
- idle: CPU of the console, of bench/trivial_app.py (20 lines repainted once a second) and of `htop -d 10`,
  each in its own tmux at 80x24, side by side over the same --seconds window. Target: W <= 1.5 x T.

    python bench/scale.py [--sides 32] [--hosts 4 | --engine slurm] [--beats 20] [--keys 200] [--seconds 30]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ENTRY, Tmux, become_subreaper, cpu_times, machine_line, pct, sim_rig  # noqa: E402

W, H = 80, 24


async def beat_ms(rig_yaml: Path, beats: int, settle_s: float = 0.0) -> list[float]:
    """Wall time of one beat over every side, as the TUI's backend polls (after one warm-up beat). settle_s:
    first poll, without measuring, until every side is served (evaluator running, heartbeat FRESH, server
    ALIVE) or settle_s has passed: a rig seconds after `sim up` has evaluators still starting, each polled in
    full every beat, and the beat of a running rig is the figure (how long it took is printed)."""
    from console.tui.backend import LiveBackend
    from console.tui.screens.main import is_tabular
    from ops.config import load_config
    from ops.platform.child_watch import use_pidfd_child_watcher
    use_pidfd_child_watcher()   # as the console's main does: a subprocess (squeue) needs no thread to be waited for
    rig = load_config(rig_yaml)
    backend = LiveBackend(rig)
    if is_tabular(len(rig.sides)):
        backend.log_tail = 0   # as the app's on_mount: a table of sides shows no pane's log, its polls read none
    await backend.start()
    try:
        t0 = time.monotonic()
        while settle_s > 0 and time.monotonic() - t0 < settle_s:
            await asyncio.gather(*(backend.probe(s, rpc=None) for s in rig.sides))
            if all(backend.live.prober.served(s) for s in rig.sides):
                break
            await asyncio.sleep(1.0)
        if settle_s > 0:
            served = sum(backend.live.prober.served(s) for s in rig.sides)
            print(f"  {served}/{len(rig.sides)} sides served after {time.monotonic() - t0:.0f} s of polling")
        out = []
        for i in range(beats + 1):
            t0 = time.perf_counter()
            # rpc=None as the TUI polls: only a cadence poll shares a host's process table with the beat
            # (rpc=False is a plan's or a command's poll, which scans afresh). As the TUI's loops, a side
            # whose poll would read nothing on this beat is not polled (LiveBackend.quiet_beat).
            beat = int(time.monotonic() // rig.poll_s) if rig.poll_s > 0 else 0
            await asyncio.gather(*(backend.probe(s, rpc=None) for s in rig.sides if not backend.quiet_beat(s, beat)))
            if i:
                out.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(1.0)
        return out
    finally:
        await backend.close()


def detail_title(screen: str) -> str | None:
    """The side named in the detail pane's title (its border: ╭─ NAME ─, ╭─ NAME RUNNING ─ or ╔═ NAME ═)."""
    m = re.search(r"[╭╔][─═] (\S+) ", screen)
    return m.group(1) if m else None


def key_latencies(tmux: Tmux, sides: list[str], presses: int) -> list[float]:
    out = []
    step = 1
    for _ in range(presses):
        before = detail_title(tmux.screen())
        if before in sides:   # the table's cursor stops at either end: turn round there
            i = sides.index(before)
            step = -1 if i == len(sides) - 1 else 1 if i == 0 else step
        want = sides[sides.index(before) + step] if before in sides else None
        t0 = time.perf_counter()
        tmux.keys("Down" if step > 0 else "Up")
        tmux.wait(lambda s: detail_title(s) == want if want else detail_title(s) != before, 10, f"detail {want}",
                  every=0.002)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sides", type=int, default=32)
    ap.add_argument("--beats", type=int, default=20)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--hosts", type=int, default=4, help="ssh hosts of the N-side rig (engine process)")
    ap.add_argument("--engine", choices=["process", "slurm"], default="process")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    from console.cli import sim as sim_cli
    from sim.slurm_rig import side_names
    from tests.support.slurm import Cluster

    with sim_rig(routes=200) as two:
        base = asyncio.run(beat_ms(two, a.beats, settle_s=120.0))
    y = statistics.median(base)
    print(f"2 sides, 1 host: beat median {y:.1f} ms (p90 {pct(base, 0.9):.1f}, mean {statistics.mean(base):.1f})")

    tmp = Path(tempfile.mkdtemp(prefix="carla-scale-"))
    names = side_names(a.sides)
    cluster = None
    tmuxes: list[Tmux] = []
    try:
        t0 = time.monotonic()
        if a.engine == "slurm":
            cluster = Cluster.start(tmp / "cluster", gpus=max(8, a.sides))   # a GPU a side: none waits for one
            os.environ["SLURM_CONF"] = str(cluster.conf)
            rig_yaml = sim_cli.up_slurm(tmp / "rig", names, route_s=600.0, routes=200, gres="gpu:1")
            n_hosts, where = 1, f"one job array on {cluster.node}"
        else:
            from sim import rig as sim
            rig_yaml = Path(sim.up(tmp / "rig", sides=names, remote=True, hosts=a.hosts, route_s=600.0,
                                   routes=200, eval_timeout_s=600.0))
            n_hosts, where = a.hosts, f"{a.hosts} ssh hosts"
        print(f"{a.sides} sides on {where}: running after {time.monotonic() - t0:.0f} s")
        many = asyncio.run(beat_ms(rig_yaml, a.beats, settle_s=120.0))
        x = statistics.median(many)
        # The mean beside the median: a small rig's beats are mostly light (a stat and a tail), its full
        # beats every third; a rig of tens of sides has some full polls on every beat.
        print(f"{a.sides} sides, {a.engine}: beat median {x:.1f} ms (p90 {pct(many, 0.9):.1f}, mean "
              f"{statistics.mean(many):.1f}); ratio {x / y:.1f}x for {a.sides / 2:.0f}x the sides (of the means "
              f"{statistics.mean(many) / statistics.mean(base):.1f}x)")

        console, trivial, htop = Tmux("scale-console", W, H), Tmux("scale-trivial", W, H), Tmux("scale-htop", W, H)
        tmuxes += [console, trivial, htop]
        pid = console.start([str(ENTRY), "-c", str(rig_yaml)])
        console.wait(lambda s: s.count("ALIVE ALIVE") >= 3, 120, "the console's table of sides")
        tpid = trivial.start([sys.executable, str(Path(__file__).with_name("trivial_app.py"))])
        trivial.wait(lambda s: "line 19" in s, 60, "the trivial app")
        hpid = htop.start(["htop", "-d", "10"])
        time.sleep(5)
        c0, t0c, h0 = cpu_times(pid), cpu_times(tpid), cpu_times(hpid)
        time.sleep(a.seconds)
        c1, t1c, h1 = cpu_times(pid), cpu_times(tpid), cpu_times(hpid)
        wall = c1.at - c0.at
        idle, triv, hto = ((e.own - s.own) / wall * 100 for s, e in ((c0, c1), (t0c, t1c), (h0, h1)))
        print(f"idle over {wall:.0f} s: console {idle:.2f} %, trivial Textual app {triv:.2f} %, htop -d 10 "
              f"{hto:.2f} % of one core; console / trivial {idle / max(triv, 1e-9):.2f}x")
        lat = key_latencies(console, names, a.keys)
        z = pct(lat, 0.99)
        print(f"keys: {len(lat)} presses of Down, median {statistics.median(lat):.0f} ms, p99 {z:.0f} ms "
              f"(includes tmux send-keys and capture-pane)")
        print(f"scale: {a.sides} sides on {n_hosts} hosts: beat median {x:.0f} ms (2 sides: {y:.0f} ms), key p99 {z:.0f} ms, "
              f"idle {idle:.2f} % (trivial Textual app {triv:.2f} %, htop {hto:.2f} %)")
        print(f"targets: beat {x / y:.1f}x <= 8x: {'met' if x / y <= 8 else 'NOT met'}; key p99 <= 100 ms: "
              f"{'met' if z <= 100 else 'NOT met'}; idle <= 1.5x trivial: {'met' if idle <= 1.5 * triv else 'NOT met'}")
        return 0
    finally:
        for t in tmuxes:
            with contextlib.suppress(Exception):
                t.stop()
        with contextlib.suppress(Exception):
            sim_cli.down(tmp / "rig")
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
