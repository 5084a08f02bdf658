"""Shared pieces of the benchmarks: the machine line, a sim rig, the console in tmux, /proc CPU times.

Everything a benchmark starts is reaped by pid. This process makes itself a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), so the tmux server — which daemonizes — is re-parented to us and can be
waited for by its pid instead of being left as a zombie for PID 1.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from tests.support.tmux_driver import Tmux  # noqa: E402,F401  (the benchmarks import it from here)

ENTRY = Path(sys.executable).with_name("carla-console")
if not ENTRY.exists():
    ENTRY = ROOT / ".venv" / "bin" / "carla-console"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants (a daemonized tmux server) come back to us, so we can reap them by pid."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine_line() -> str:
    return (f"machine: {os.cpu_count()} cores ({cpu_model()}), python {platform.python_version()}, "
            f"{len(psutil.pids())} processes, load average {loadavg()}")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank: p99 of 200 samples is the 198th smallest."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(q * len(s) + 0.5)) - 1))
    return s[k]


def summary_ms(values_s: list[float]) -> str:
    ms = [v * 1e3 for v in values_s]
    return (f"n={len(ms)} median {statistics.median(ms):.1f} ms, p90 {pct(ms, .9):.1f} ms, "
            f"p99 {pct(ms, .99):.1f} ms, max {max(ms):.1f} ms")


# ------------------------------------------------------------------------------------------ /proc times

@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU from /proc/PID/stat: the process itself, and its reaped children."""
    utime: float
    stime: float
    cutime: float
    cstime: float
    at: float

    @property
    def own(self) -> float:
        return self.utime + self.stime

    @property
    def children(self) -> float:
        return self.cutime + self.cstime


def cpu_times(pid: int) -> CpuTimes:
    raw = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    ut, st, cut, cst = (int(fields[i]) / CLK_TCK for i in (11, 12, 13, 14))
    return CpuTimes(ut, st, cut, cst, time.monotonic())


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# ---------------------------------------------------------------------------------------------- sim rig

def routes_for(seconds: float) -> int:
    """Routes enough that the sim's evaluators still run after `seconds`: a benchmark of a running rig must
    not end on a finished one (10 routes are done in 30 s, and a quiet log costs the console less)."""
    from sim.rig import ROUTE_S
    return max(10, int(seconds / ROUTE_S) + 1)


@contextlib.contextmanager
def sim_rig(**up_kw) -> Iterator[Path]:
    """A two-side sim rig in a temp dir; yields its rig.yaml; down() (by recorded pids) and rm on exit."""
    from sim import rig as sim
    d = Path(tempfile.mkdtemp(prefix="carla-bench-"))
    try:
        yield Path(sim.up(d / "rig", **up_kw))
    finally:
        try:
            sim.down(d / "rig")
        finally:
            shutil.rmtree(d, ignore_errors=True)


def pane_lines(screen: str, side_index: int, width: int) -> list[str]:
    """The lines of the left (0) or right (1) pane column at `width` columns (two-column layout)."""
    half = width // 2
    return [ln[:half] if side_index == 0 else ln[half:] for ln in screen.splitlines()]


def left_focused(screen: str, width: int) -> bool | None:
    """Whether the left pane (A) shows the focus border (double line), None when its title is not seen.

    The right pane's focus cannot be read when it is greyed (a hung host): `.side-pane.-greyed` sets its
    border after `.side-pane:focus` in app.tcss, so a greyed pane looks the same focused or not."""
    for ln in screen.splitlines():
        left = ln[: width // 2]
        if "═ A ═" in left:
            return True
        if "─ A ─" in left:
            return False
    return None


def focused_side(screen: str, width: int) -> int | None:
    """Which pane has the focus border (Textual draws the focused pane with a double line: ╔)."""
    for ln in screen.splitlines():
        if "═ A ═" in ln or "─ A ─" in ln:
            left, right = ln[: width // 2], ln[width // 2:]
            if "╔" in left and "╔" not in right:
                return 0
            if "╔" in right and "╔" not in left:
                return 1
    return None


def reap_popen(p: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 3.0) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(sig)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
