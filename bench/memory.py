"""Benchmark: RSS growth over 3,600 poll cycles (an hour at 1 Hz), with no sleep between cycles.

1. ops level: ops.probes.prober.Prober.all(tail=3) on a two-side sim rig (one LiveRig, its caches shared
   across cycles, as the console keeps them).
2. the TUI's poll path: ConsoleApp with the LiveBackend, headless (Textual's run_test at 120x40) and
   poll_s=0.001, until each side's pane has been handed 3,600 snapshots — probe, show_snapshot, render.

RSS (VmRSS of this process) at start, after a warm-up of 100 cycles, and at the end; the target is on
the growth after warm-up (< 5 MB), and the growth from start is shown beside it.

    python bench/memory.py [--cycles 3600] [--tui-cycles 3600]
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import become_subreaper, machine_line, rss_mb, sim_rig, verdict  # noqa: E402

WARMUP = 100
LIMIT_MB = 5.0


async def ops_level(rig_yaml: Path, cycles: int) -> tuple[float, float, float, float]:
    from ops.config import load_config
    from ops.rig import open_rig
    async with open_rig(load_config(rig_yaml)) as live:
        start = rss_mb()
        t0 = time.perf_counter()
        warm = start
        for i in range(cycles):
            snaps = await live.prober.all(tail=3)
            if i == 0:
                states = {n: s.server.verdict.state.value for n, s in snaps.items()}
            if i + 1 == WARMUP:
                warm = rss_mb()
        took = time.perf_counter() - t0
        end = rss_mb()
    print(f"ops level: {cycles} x Prober.all(tail=3) on sides {states} in {took:.1f} s "
          f"({took / cycles * 1e3:.1f} ms a cycle)")
    return start, warm, end, took


async def tui_level(rig_yaml: Path, cycles: int) -> tuple[float, float, float, float]:
    from console.tui.app import ConsoleApp
    from console.tui.backend import LiveBackend
    from ops.config import load_config

    marks: dict[str, float] = {}

    import console.tui.app as app_mod

    class CountingApp(ConsoleApp):
        # Textual resolves CSS_PATH against the subclass's module: point it back at the console's own.
        CSS_PATH = str(Path(app_mod.__file__).with_name("app.tcss"))
        counts: dict[str, int] = {}

        def show_snapshot(self, snap) -> None:
            super().show_snapshot(snap)
            self.counts[snap.name] = self.counts.get(snap.name, 0) + 1
            done = min(self.counts.get(s, 0) for s in self.sides)
            if done >= 1 and "start" not in marks:
                marks["start"] = rss_mb()
            if done >= WARMUP and "warm" not in marks:
                marks["warm"] = rss_mb()

    app = CountingApp(LiveBackend(load_config(rig_yaml)), poll_s=0.001)   # 0 makes Textual divide by zero in set_timer
    t0 = time.perf_counter()
    async with app.run_test(size=(120, 40)):
        while min(app.counts.get(s, 0) for s in app.sides) < cycles:
            await asyncio.sleep(0.2)
            if not app.is_running:
                raise RuntimeError(f"the app stopped after {app.counts} snapshots")
            if time.perf_counter() - t0 > 1800:
                raise TimeoutError(f"TUI poll path: only {app.counts} snapshots in 30 min")
        marks["end"] = rss_mb()
        took = time.perf_counter() - t0
        errors = [w for w in app.workers if w.error is not None]
    print(f"TUI poll path: {app.counts} snapshots shown in {took:.1f} s "
          f"({took / cycles * 1e3:.1f} ms a cycle of both sides), {len(errors)} worker error(s)")
    return marks["start"], marks["warm"], marks["end"], took


def report(what: str, start: float, warm: float, end: float, cycles: int) -> bool:
    grow = end - warm
    print(f"{what}: RSS start {start:.1f} MiB, after {WARMUP} cycles {warm:.1f} MiB, after {cycles} cycles "
          f"{end:.1f} MiB: +{grow:.2f} MiB after warm-up (+{end - start:.2f} MiB from start)")
    return grow < LIMIT_MB


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3600)
    ap.add_argument("--tui-cycles", type=int, default=3600, help="0 skips the TUI poll path")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    oks = []
    with sim_rig() as rig_yaml:
        s, w, e, _ = asyncio.run(ops_level(rig_yaml, a.cycles))
        oks.append(report("ops level", s, w, e, a.cycles))
        gc.collect()
        if a.tui_cycles:
            s, w, e, _ = asyncio.run(tui_level(rig_yaml, a.tui_cycles))
            oks.append(report("TUI poll path", s, w, e, a.tui_cycles))
    print(f"memory: growth after warm-up < {LIMIT_MB:g} MB on {'both paths' if len(oks) == 2 else 'the ops path'}: "
          f"{verdict(all(oks))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
