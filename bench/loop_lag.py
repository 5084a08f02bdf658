"""Diagnostic for responsive.py: what blocks the console's event loop while side B's host hangs.

The TUI (ConsoleApp + LiveBackend, headless via run_test at 120x40) on the same rig as responsive.py
(side B on an ssh host that never speaks, side A's evaluator hung so its age counts up). A task
measures the loop's lag (a 10 ms sleep's overshoot), and asyncio's debug mode names every callback
that ran longer than --slow-ms, with its duration; they are grouped and printed, longest first.

    python bench/loop_lag.py [--seconds 30] [--slow-ms 30] [--healthy]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import become_subreaper, machine_line, pct, sim_rig  # noqa: E402
from responsive import SilentListener, hang_side_b  # noqa: E402

SLOW = re.compile(r"Executing (.*) took (\d+\.\d+) seconds")


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.slow: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = SLOW.search(record.getMessage())
        if m:
            what = re.sub(r"0x[0-9a-f]+", "0x…", m.group(1))
            what = re.sub(r" created at .*", "", what)
            self.slow.append((what[:220], float(m.group(2))))


async def run(rig_yaml: Path, seconds: float, slow_ms: float) -> None:
    from console.tui.app import ConsoleApp
    from console.tui.backend import LiveBackend
    from ops.config import load_config
    handler = Collect()
    log = logging.getLogger("asyncio")
    log.addHandler(handler)
    log.propagate = False
    app = ConsoleApp(LiveBackend(load_config(rig_yaml)))
    lags: list[float] = []
    async with app.run_test(size=(120, 40)):
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = slow_ms / 1e3
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - t0 - 0.01)
        loop.set_debug(False)
    lag_ms = [x * 1e3 for x in lags]
    print(f"loop lag over {seconds:g} s ({len(lags)} samples): median {pct(lag_ms, .5):.1f} ms, "
          f"p99 {pct(lag_ms, .99):.1f} ms, max {max(lag_ms):.1f} ms")
    groups: dict[str, list[float]] = collections.defaultdict(list)
    for what, took in handler.slow:
        groups[what].append(took)
    print(f"callbacks over {slow_ms:g} ms: {len(handler.slow)}")
    for what, v in sorted(groups.items(), key=lambda kv: -max(kv[1]))[:15]:
        print(f"  {len(v):3d}x max {max(v) * 1e3:6.0f} ms  sum {sum(v) * 1e3:6.0f} ms  {what}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--slow-ms", type=float, default=30)
    ap.add_argument("--healthy", action="store_true", help="both sides local (no hung host): the reference")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    listener = SilentListener()
    try:
        with sim_rig() as rig_yaml:
            from sim import rig as sim
            cfg = rig_yaml if a.healthy else hang_side_b(rig_yaml, listener.port)
            sim.inject(rig_yaml.parent, "A", "hang")
            print(f"rig: {'healthy (both sides local)' if a.healthy else 'side B on a host that never speaks'}")
            asyncio.run(run(cfg, a.seconds, a.slow_ms))
    finally:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
