"""Attribution of the idle console's CPU: every asyncio callback's thread CPU, by who owns it.

The real console (`console.tui.backend.run`) runs in tmux at 120x40 on a two-side sim rig, as in idle.py, with two
wrappers installed before it starts: asyncio's Handle._run (each callback's time.thread_time(), keyed by
its owner: a Textual timer by name, a worker, a widget's message pump, or a task by its coroutine) and
Textual's public Widget.render_lines (per widget class: what a compositor pass spends on each). After a
warm-up the counters run for a window, then the console writes them to a JSON file and the figures are
printed: the process, its main thread, and the callbacks, as % of one core. With --calls the window
also runs under cProfile and the number of Python function calls is printed: a count that does not move
with this shared machine's speed, so it compares two versions of the console across rounds (the CPU
figures are then inflated by the profiler).

The wrappers cost a little themselves, so the totals read higher than idle.py's; the shares are what
this is for.

    python bench/loop_cpu.py [--seconds 30] [--warmup 8] [--calls] [--pstats FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Tmux, become_subreaper, machine_line, routes_for, sim_rig  # noqa: E402

W, H = 120, 40


def console(rig: str, out: str, warmup: float, seconds: float, count_calls: bool, dump: str | None) -> int:
    """The console side: install the counters, run the entry point, write `out` after the window."""
    import asyncio
    import collections

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    cpu: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    widget_cpu: collections.Counter[str] = collections.Counter()
    widget_calls: collections.Counter[str] = collections.Counter()
    on = [False]
    tt = time.thread_time

    def owner(handle: asyncio.Handle) -> str:
        cb = handle._callback  # type: ignore[attr-defined]
        task = getattr(cb, "__self__", None)
        if not isinstance(task, asyncio.Task):
            return f"callback {getattr(cb, '__qualname__', type(cb).__name__)}"
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        me = coro.cr_frame.f_locals.get("self") if getattr(coro, "cr_frame", None) else None
        if name == "MessagePump._process_messages":
            return f"message pump of {type(me).__name__}"
        if name in ("Timer._run", "Timer._run_timer"):
            return f"timer {getattr(me, 'name', '?')}"
        if name.startswith("Worker."):
            return f"worker {getattr(me, 'name', '') or getattr(me, 'group', '?')}"
        return f"task {name}"

    run = asyncio.events.Handle._run

    def timed_run(self: asyncio.Handle) -> None:
        if not on[0]:
            return run(self)
        t = tt()
        try:
            return run(self)
        finally:
            k = owner(self)
            cpu[k] += tt() - t
            calls[k] += 1

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    from textual.widget import Widget
    render_lines = Widget.render_lines

    def timed_render(widget, crop):
        if not on[0]:
            return render_lines(widget, crop)
        t = tt()
        try:
            return render_lines(widget, crop)
        finally:
            widget_cpu[type(widget).__name__] += tt() - t
            widget_calls[type(widget).__name__] += 1

    Widget.render_lines = timed_render  # type: ignore[method-assign]

    import cProfile
    import pstats
    profile = cProfile.Profile() if count_calls or dump else None

    from console.tui import backend as tui
    from console.tui.app import ConsoleApp
    mount = ConsoleApp.on_mount

    async def on_mount(self: ConsoleApp) -> None:
        await mount(self)
        start: dict[str, float] = {}

        def begin() -> None:
            start.update(process=time.process_time(), main=tt(), wall=time.monotonic())
            on[0] = True
            if profile is not None:
                profile.enable()

        def end() -> None:
            on[0] = False
            if profile is not None:
                profile.disable()
                if dump:
                    profile.dump_stats(dump)
            wall = time.monotonic() - start["wall"]
            Path(out).write_text(json.dumps({
                "calls": pstats.Stats(profile).total_calls if profile is not None else None,  # type: ignore[attr-defined]
                "wall": wall, "process": time.process_time() - start["process"], "main": tt() - start["main"],
                "callbacks": {k: [cpu[k], calls[k]] for k in cpu},
                "widgets": {k: [widget_cpu[k], widget_calls[k]] for k in widget_cpu}}))

        self.set_timer(warmup, begin)
        self.set_timer(warmup + seconds, end)

    ConsoleApp.on_mount = on_mount  # type: ignore[method-assign]
    return tui.run(argparse.Namespace(config=rig, read_only=False, demo=False))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--calls", action="store_true", help="count Python function calls (cProfile) too")
    ap.add_argument("--pstats", metavar="FILE", help="also write the window's cProfile stats to FILE")
    ap.add_argument("--console", nargs=2, metavar=("RIG", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.console:
        return console(a.console[0], a.console[1], a.warmup, a.seconds, a.calls, a.pstats)
    become_subreaper()
    print(machine_line())
    out = Path(tempfile.mkdtemp(prefix="carla-bench-loop-")) / "loop.json"
    with sim_rig(routes=routes_for(a.warmup + a.seconds + 60)) as rig_yaml:
        tmux = Tmux("loop-cpu", W, H)
        try:
            tmux.start([sys.executable, __file__, "--warmup", str(a.warmup), "--seconds", str(a.seconds),
                        *(["--calls"] if a.calls else []),
                        *(["--pstats", str(Path(a.pstats).resolve())] if a.pstats else []), "--console", str(rig_yaml), str(out)])
            deadline = time.monotonic() + a.warmup + a.seconds + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            tmux.keys("q")
            tmux.wait_dead(20)
        finally:
            tmux.stop()
    if not out.exists():
        print("loop_cpu: the console wrote no figures")
        return 1
    r = json.loads(out.read_text())
    wall = r["wall"]

    def pct(s: float) -> str:
        return f"{100 * s / wall:6.3f} %"

    cbs = sum(v[0] for v in r["callbacks"].values())
    if r.get("calls") is not None:
        print(f"Python function calls in the window: {r['calls']} ({r['calls'] / wall:.0f} a second; "
              f"under cProfile, so the CPU figures below are inflated)")
    print(f"window {wall:.1f} s: process {pct(r['process'])}, main thread {pct(r['main'])}, "
          f"asyncio callbacks {pct(cbs)} of one core (the rest of the main thread is the loop itself)")
    print("callbacks, by owner:")
    for k, (s, n) in sorted(r["callbacks"].items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"  {pct(s)}  {n:6d} calls  {1e6 * s / n:7.0f} us each  {k}")
    rendered = sum(v[0] for v in r["widgets"].values())
    print(f"compositor: StylesCache.render_widget {pct(rendered)}, by widget class:")
    for k, (s, n) in sorted(r["widgets"].items(), key=lambda kv: -kv[1][0]):
        print(f"  {pct(s)}  {n:6d} renders  {1e6 * s / n:7.0f} us each  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
