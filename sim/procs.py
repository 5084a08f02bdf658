"""Process identity for the sim: records of (pid, create_time), and stopping exactly those.

House rule: never kill by name or substring. Every process the sim starts — or that a fake tool of this
rig starts on the console's behalf — is recorded by pid + create_time (rig.up writes pids.json; the
long-lived fakes append themselves to registry.jsonl at start). Stopping re-checks the identity right
before each signal, so a recycled pid is never hit.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from sim.layout import CREATE_TIME_TOLERANCE_S, SimLayout, read_json, write_json_atomic


@dataclass(frozen=True)
class ProcRecord:
    pid: int
    create_time: float
    role: str                       # launcher | server | conda | evaluator | nvidia-smi | netsh | ...
    side: str | None = None
    argv: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        d = asdict(self)
        d["argv"] = list(self.argv)
        return d

    @classmethod
    def from_json(cls, d: dict) -> ProcRecord:
        return cls(pid=int(d["pid"]), create_time=float(d["create_time"]), role=str(d["role"]),
                   side=d.get("side"), argv=tuple(d.get("argv") or ()))

    @classmethod
    def of(cls, proc: psutil.Process, role: str, side: str | None = None) -> ProcRecord:
        with proc.oneshot():
            return cls(pid=proc.pid, create_time=proc.create_time(), role=role, side=side,
                       argv=tuple(proc.cmdline()))


def identify(rec: ProcRecord) -> psutil.Process | None:
    """The live process this record names, or None if it is gone (or the pid now belongs to another).

    A zombie counts as gone: it has exited, only its parent has not reaped it yet.
    """
    try:
        proc = psutil.Process(rec.pid)
        if abs(proc.create_time() - rec.create_time) > CREATE_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


# ----------------------------------------------------------------------------------------------- records

def _locked_update(path: Path, fn) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(path.suffix + ".lock")
    with open(lock, "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        data = read_json(path, [])
        write_json_atomic(path, fn(data))


def record_started(layout: SimLayout, recs: Iterable[ProcRecord]) -> None:
    """Add to D/sim/pids.json: what rig.up / start_evaluator / start_server started."""
    new = [r.to_json() for r in recs]
    _locked_update(layout.pids_json, lambda data: data + new)


def started(layout: SimLayout) -> list[ProcRecord]:
    return [ProcRecord.from_json(d) for d in read_json(layout.pids_json, [])]


def register_self(layout: SimLayout, role: str, side: str | None = None) -> ProcRecord | None:
    """Append this process to D/sim/registry.jsonl (one O_APPEND write: concurrent writers do not mix).

    Best effort by design: a fake tool must still behave like the real one if the sim dir is read-only.
    """
    try:
        rec = ProcRecord.of(psutil.Process(os.getpid()), role, side)
        layout.registry.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(rec.to_json()) + "\n").encode()
        fd = os.open(layout.registry, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return rec
    except OSError:
        return None


def registered(layout: SimLayout) -> list[ProcRecord]:
    out: list[ProcRecord] = []
    try:
        lines = layout.registry.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            out.append(ProcRecord.from_json(json.loads(line)))
        except (ValueError, KeyError):
            continue  # a line cut by a crash mid-write: that process registered nothing usable
    return out


def all_records(layout: SimLayout) -> list[ProcRecord]:
    """pids.json + registry, deduplicated by (pid, create_time)."""
    seen: set[tuple[int, float]] = set()
    out: list[ProcRecord] = []
    for rec in started(layout) + registered(layout):
        key = (rec.pid, round(rec.create_time, 1))
        if key not in seen:
            seen.add(key)
            out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------- stopping

@dataclass(frozen=True)
class StopReport:
    terminated: tuple[int, ...] = ()   # gone after SIGTERM
    killed: tuple[int, ...] = ()       # needed SIGKILL
    survivors: tuple[int, ...] = ()    # still there after SIGKILL (should never happen)


def with_descendants(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes and all their descendants, outer first, each once."""
    out: list[psutil.Process] = []
    seen: set[int] = set()
    for proc in procs:
        try:
            family = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for p in family:
            if p.pid not in seen:
                seen.add(p.pid)
                out.append(p)
    return out


def frozen_family(roots: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The roots and all their descendants, outer first, each stopped (SIGSTOP) before its children are read.

    A stopped process cannot fork, so the family read this way is complete. A snapshot of descendants taken
    while the family runs misses a child forked after it: a `conda run` that spawns its evaluator just after
    the snapshot leaves that evaluator running once conda is killed (conda forwards no signal).
    """
    out: list[psutil.Process] = []
    seen: set[int] = set()
    frontier = list(roots)
    while frontier:
        stopped = []
        for proc in frontier:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                proc.suspend()   # psutil re-checks the create time: a recycled pid is refused
            except psutil.NoSuchProcess:
                continue
            out.append(proc)
            stopped.append(proc)
        frontier = []
        for proc in stopped:
            try:
                frontier.extend(proc.children())
            except psutil.NoSuchProcess:
                continue
    return out


def stop_family(roots: Iterable[psutil.Process], grace_s: float = 3.0) -> StopReport:
    """Stop the roots and every descendant, none missed (frozen_family): SIGTERM to each while frozen, then
    SIGCONT so each acts on it, then as `stop`."""
    family = frozen_family(roots)
    _each(family, psutil.Process.terminate)
    _each(family, psutil.Process.resume)
    return _reap(family, grace_s)


def stop(procs: Iterable[psutil.Process], grace_s: float = 3.0) -> StopReport:
    """SIGTERM each (outer → inner), wait up to grace_s, SIGKILL what is left, wait again.

    psutil.Process objects remember their create time and refuse to signal a recycled pid
    (NoSuchProcess), which is the re-check right before the signal.
    """
    targets = list(procs)
    _each(targets, psutil.Process.terminate)
    return _reap(targets, grace_s)


def _each(procs: Iterable[psutil.Process], send: Callable[[psutil.Process], None]) -> None:
    for proc in procs:
        try:
            send(proc)
        except psutil.NoSuchProcess:
            pass


def _reap(targets: list[psutil.Process], grace_s: float) -> StopReport:
    """After the SIGTERM: wait up to grace_s, SIGKILL what is left, wait again."""
    alive_ = wait_gone(targets, grace_s)
    _each(alive_, psutil.Process.kill)
    survivors = wait_gone(alive_, 2.0)
    return StopReport(terminated=tuple(p.pid for p in targets if p not in alive_),
                      killed=tuple(p.pid for p in alive_ if p not in survivors),
                      survivors=tuple(p.pid for p in survivors))


def gone(proc: psutil.Process) -> bool:
    """Exited? A zombie has exited (its parent just has not reaped it; we reap it if it is ours).

    psutil.wait_procs would wait for an orphaned zombie until its timeout when PID 1 reaps slowly.
    """
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return True
    try:
        proc.wait(timeout=0)   # reaps it when it is our child; raises for anyone else's
    except (psutil.TimeoutExpired, psutil.Error, ChildProcessError):
        pass
    return True


def wait_gone(procs: Iterable[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until every process is gone (or a zombie); return those still running at the deadline."""
    pending = list(procs)
    end = time.monotonic() + timeout_s
    while True:
        pending = [p for p in pending if not gone(p)]
        if not pending or time.monotonic() >= end:
            return pending
        time.sleep(0.02)


def find_by_token(token: str, *, argv0: str | None = None) -> list[psutil.Process]:
    """Processes whose cmdline holds `token` as a whole argv element (never a substring match).

    argv0: also require cmdline[0] to be exactly this path (e.g. the shipping binary, not its launcher).
    """
    found: list[psutil.Process] = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if proc.pid == me or token not in cmd:
            continue
        if argv0 is not None and (not cmd or cmd[0] != argv0):
            continue
        found.append(proc)
    return found


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll predicate() until true or timeout; returns its last truthiness."""
    end = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval_s)
