"""The suite under load, on fresh clones: does it pass N times out of N with CPU hogs beside it?

    python -m tests.support.stress --runs 5 --fresh-clone [--ref main] [--cpu 2] [--faults N] [--nice 10]

Clones REF of this repository into a temporary directory (no hard links: a clone as CI makes it), then
runs `.ci/run` there RUNS times, one after the other, while `stress-ng --cpu CPU` keeps CPU workers busy
beside it (Debian's stress-ng; the tool refuses to run without it). With `--faults N` it also runs the
fault report (`tests/faults/report.py`) N times under the same load. It prints one line per run (exit
code, wall time, pytest's summary line) and the pass counts, and exits 0 only when every run passed.

Not a CI test: it costs the whole machine for as long as the runs take. Run it niced, once.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    kind: str          # 'ci' | 'faults'
    n: int
    rc: int
    wall_s: float
    summary: str       # the last line that says what passed (pytest's or the fault report's)

    @property
    def passed(self) -> bool:
        return self.rc == 0


def _summary(text: str, kind: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    want = "faults:" if kind == "faults" else " passed"
    hits = [ln for ln in lines if want in ln]
    return (hits[-1] if hits else (lines[-1] if lines else ""))[:300]


def clone(ref: str, into: Path) -> Path:
    dest = into / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-local", "--branch", ref, str(REPO), str(dest)], check=True)
    return dest


def start_hogs(cpu: int, nice: int) -> subprocess.Popen:
    exe = shutil.which("stress-ng")
    if exe is None:
        sys.exit("stress: stress-ng is not installed (apt-get install stress-ng)")
    # Its own session: stopped as a group (stress-ng forks one worker per --cpu) by the pid we started.
    # At the runs' niceness: the hogs compete with the suite as they would un-niced, and a shared
    # machine's other users keep their share.
    argv = [exe, "--cpu", str(cpu), "--quiet"]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop_hogs(hogs: subprocess.Popen) -> None:
    if hogs.poll() is None:
        os.killpg(hogs.pid, signal.SIGTERM)
        try:
            hogs.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(hogs.pid, signal.SIGKILL)
            hogs.wait()


def run_one(kind: str, n: int, repo: Path, nice: int, log_dir: Path, timeout_s: float) -> Run:
    argv = [".ci/run"] if kind == "ci" else [str(repo / ".venv" / "bin" / "python"), "tests/faults/report.py"]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    log = log_dir / f"{kind}-{n}.log"
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        try:
            rc = subprocess.run(argv, cwd=repo, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    wall = time.monotonic() - t0
    return Run(kind, n, rc, wall, _summary(log.read_text(errors="replace"), kind))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.stress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help=".ci/run this many times (default 5)")
    ap.add_argument("--faults", type=int, default=1, help="then the fault report this many times (default 1)")
    ap.add_argument("--fresh-clone", action="store_true", help="clone REF into a temp dir (else: this tree)")
    ap.add_argument("--ref", default="main", help="the branch to clone (default main)")
    ap.add_argument("--cpu", type=int, default=2, help="stress-ng --cpu workers (default 2)")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the runs and the hogs (default 10)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds (default 3600)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the logs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="carla-stress-"))
    repo = clone(args.ref, tmp) if args.fresh_clone else REPO
    logs = tmp / "logs"
    logs.mkdir()
    runs: list[Run] = []
    hogs = start_hogs(args.cpu, args.nice)
    try:
        for kind, count in (("ci", args.runs), ("faults", args.faults)):
            for n in range(1, count + 1):
                r = run_one(kind, n, repo, args.nice, logs, args.timeout)
                runs.append(r)
                print(f"{kind} {n}: {'pass' if r.passed else 'FAIL'} rc={r.rc} {r.wall_s:.0f} s  {r.summary}",
                      flush=True)
    finally:
        stop_hogs(hogs)
    ci = [r for r in runs if r.kind == "ci"]
    faults = [r for r in runs if r.kind == "faults"]
    line = (f"stress: .ci/run {sum(r.passed for r in ci)}/{len(ci)} passed, fault report "
            f"{sum(r.passed for r in faults)}/{len(faults)} passed, with stress-ng --cpu {args.cpu} beside them "
            f"(ref {args.ref if args.fresh_clone else 'this tree'}, nice {args.nice}); logs {logs}")
    if args.json:
        print(json.dumps({"runs": [asdict(r) for r in runs], "summary": line}, indent=2))
    print(line)
    if not args.keep and all(r.passed for r in runs):
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if runs and all(r.passed for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
