"""Shared machinery of the fault scenarios: process-table snapshot + diff, audit reader, record counter.

Every scenario checks the same three things, so they are here once:

- **nothing outside the plan touched**: `Procs.snapshot()` before and after; every process that vanished
  must be a planned target (pid + create time) or a descendant of one (as the *before* table saw it), or
  a process the scenario itself stopped on purpose (`expected`). The count of the others is written to
  $CARLA_FAULTS_COUNT_FILE as `touched <n>` (and asserted 0).
- **no checkpoint record lost**: `Records` samples every side's completed-record count; a count may grow,
  never shrink (`lost <n>`).
- **an audit line for every destructive step**: `Audit.since(mark)` reads the state dir's audit.jsonl
  from a mark; `need()` finds the line of an operation with its outcome and targets.

The snapshot covers the processes this pytest session started (conftest's environment mark), which is
every sim fake, harness, evaluator and decoy; sshd's own per-connection processes and the commands they
run come and go with connections, so they are left out (an sshd the scenario stops is its own act).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ops.platform.procs import Proc, read_proc
from tests.support.session import marked_processes
from tests.support.sshd import SSHD

Key = tuple[int, float]


def count(line: str) -> None:
    """Append one counter line for tests/faults/report.py (only when it asked for them)."""
    path = os.environ.get("CARLA_FAULTS_COUNT_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")


def key(pid: int, create_time: float) -> Key:
    return (pid, round(create_time, 2))


# ---- process table --------------------------------------------------------------------------------

def _sshd_side(p: Proc, by_pid: dict[int, Proc]) -> bool:
    """An sshd process or anything running under one (a probe run over SSH)."""
    q: Proc | None = p
    for _ in range(64):
        if q is None:
            return False
        argv = q.cmdline or ()
        if argv and (argv[0] == SSHD or argv[0].startswith("sshd")):
            return True
        q = by_pid.get(q.ppid)
    return False


@dataclass(frozen=True)
class Snapshot:
    procs: dict[Key, Proc]
    at: float

    def keys(self) -> set[Key]:
        return set(self.procs)

    def descendants(self, roots: Iterable[Key]) -> set[Key]:
        """roots and every process below them in this snapshot's parent links."""
        by_pid = {p.pid: k for k, p in self.procs.items()}
        kids: dict[int, list[Key]] = {}
        for k, p in self.procs.items():
            kids.setdefault(p.ppid, []).append(k)
        out: set[Key] = set()
        todo = [k for k in roots]
        while todo:
            k = todo.pop()
            if k in out:
                continue
            out.add(k)
            pid = k[0]
            if by_pid.get(pid) == k:
                todo.extend(kids.get(pid, []))
        return out


class Procs:
    """Snapshots of this session's live processes (pid + create time), and the diff rule."""

    @staticmethod
    def snapshot() -> Snapshot:
        me = os.getpid()
        raw: dict[int, Proc] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            p = read_proc(int(name))
            if p is not None and p.state != "Z":
                raw[p.pid] = p
        marked = set(marked_processes())
        out = {}
        for p in raw.values():
            if p.pid in marked and not _sshd_side(p, raw):
                out[key(p.pid, p.create_time)] = p
        return Snapshot(out, time.time())

    @staticmethod
    def wrongly_touched(before: Snapshot, after: Snapshot, planned: Iterable[Key],
                        expected: Iterable[Key] = ()) -> list[Proc]:
        """Processes of `before` gone in `after` that no plan (nor the scenario itself) named."""
        allowed = before.descendants([key(*k) for k in planned]) | before.descendants([key(*k) for k in expected])
        return [p for k, p in before.procs.items() if k not in after.procs and k not in allowed]

    @classmethod
    def check(cls, before: Snapshot, planned: Iterable[Key], expected: Iterable[Key] = (),
              settle_s: float = 0.0) -> Snapshot:
        """Take the after-snapshot, count and assert: no process outside the plan vanished."""
        if settle_s:
            time.sleep(settle_s)
        after = cls.snapshot()
        wrong = cls.wrongly_touched(before, after, list(planned), list(expected))
        count(f"touched {len(wrong)}")
        assert not wrong, "processes outside the plan vanished:\n" + "\n".join(
            f"  {p.pid} ({p.create_time:.2f}) {p.cmd_text(200)}" for p in wrong)
        return after


def plan_keys(kill_plan: Iterable[dict]) -> list[Key]:
    """(pid, create time) of every target in a JSON plan (recover's kill_plan, reclaim's targets)."""
    return [key(int(t["pid"]), float(t["create_time"])) for t in kill_plan]


def alive(k: Key) -> bool:
    p = read_proc(k[0])
    return p is not None and p.state != "Z" and abs(p.create_time - k[1]) <= 0.05


def pids_with_pair(flag: str, value: str) -> list[Proc]:
    """Live processes whose argv holds `flag value` as two whole tokens (or `flag=value`)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        p = read_proc(int(name))
        if p is not None and p.state != "Z" and p.cmdline and p.has_pair(flag, value):
            out.append(p)
    return out


def evaluators_of(rpc_port: int, tm_port: int) -> list[Proc]:
    """The processes that carry a side's exact evaluator tokens (wrappers and evaluators alike)."""
    return [p for p in pids_with_pair("--port", str(rpc_port)) if p.has_pair("--traffic-manager-port", str(tm_port))]


# ---- audit ----------------------------------------------------------------------------------------

class Audit:
    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.path = Path(state_dir) / "audit.jsonl"

    def lines(self) -> list[dict]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]

    def mark(self) -> int:
        return len(self.lines())

    def since(self, mark: int) -> list[dict]:
        return self.lines()[mark:]

    def need(self, mark: int, operation: str, outcome: str | None = None,
             targets: Iterable[Key] | None = None) -> dict:
        """The audit line of `operation` (with `outcome`, naming exactly `targets`) written after mark."""
        lines = self.since(mark)
        for ln in lines:
            if ln.get("operation") != operation or (outcome is not None and ln.get("outcome") != outcome):
                continue
            if targets is not None:
                got = {key(int(t["pid"]), float(t["create_time"])) for t in ln.get("targets", [])}
                if got != {key(*k) for k in targets}:
                    continue
            return ln
        raise AssertionError(f"no audit line {operation}/{outcome} for {targets} in "
                             f"{[(ln.get('operation'), ln.get('outcome')) for ln in lines]}")

    def destructive(self, mark: int) -> list[dict]:
        """Lines since mark that record an act (not a refusal)."""
        return [ln for ln in self.since(mark) if ln.get("outcome") not in ("refused",)]


# ---- checkpoint records ---------------------------------------------------------------------------

def completed(path: Path) -> int | None:
    """Completed (non-Started) records in a checkpoint; None when absent or caught half-written."""
    try:
        data = json.loads(path.read_text())
        return sum(1 for r in data["_checkpoint"]["records"] if r.get("status") != "Started")
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Records:
    """Samples the completed-record count of checkpoints; counts may grow, never shrink."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.high: dict[str, int] = {}
        self.lost = 0
        self.sample()

    def sample(self) -> dict[str, int | None]:
        now = {}
        for name, path in self.paths.items():
            n = completed(path)
            now[name] = n
            if n is None:
                continue   # unreadable this instant (being rewritten): not a count, try again later
            hi = self.high.get(name, 0)
            if n < hi:
                self.lost += hi - n
            self.high[name] = max(hi, n)
        return now

    def watch(self, pred: Callable[[], object], timeout: float, every: float = 0.1) -> object:
        """wait_until that samples the records at every poll."""
        deadline = time.monotonic() + timeout
        while True:
            self.sample()
            got = pred()
            if got or time.monotonic() >= deadline:
                return got
            time.sleep(every)

    def check(self) -> None:
        # A final read must succeed: the suite never leaves a checkpoint half-written.
        self.sample()
        count(f"lost {self.lost}")
        assert self.lost == 0, f"{self.lost} checkpoint record(s) lost (high water {self.high})"


def checkpoint_path(d: Path, side: str) -> Path:
    return d / "work" / side / "results" / "result.json"


def backups(d: Path, side: str) -> list[Path]:
    folder = d / "state" / "sides" / side / "backups"
    return sorted(folder.iterdir()) if folder.is_dir() else []
