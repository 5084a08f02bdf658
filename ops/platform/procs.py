"""Process tables: who runs on a host, identified by (pid, create_time), with exact argv tokens.

The local scanner is built for a 1 Hz poll: listing /proc with scandir costs ~2 ms for 1,000 processes,
while reading every /proc/PID/stat costs ~20 ms and psutil ~140 ms. A procfs directory's inode number is
minted when its dentry is instantiated and the dentry is flushed when the process is released, so a new
process on a reused pid shows a new inode: (pid, inode) keys a cache of the immutable facts (create time,
cmdline). Young processes are re-read until they settle, because right after fork() a child still shows
its parent's cmdline until it execs. The guard never trusts this cache: it re-reads /proc/PID/stat right
before a signal.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ops.tristate import Evidence

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_SETTLE_S = 2.0   # re-read a process's cmdline until it is this old (fork-then-exec window)


def printable(text: str) -> str:
    """text with argv bytes that were not UTF-8 (decoded with surrogateescape, so the identity stays exact)
    shown as \\xNN: safe to encode, print, write to the audit or a JSON line."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:   # a lone surrogate outside the escape range
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    create_time: float                 # epoch seconds; with pid, the identity of a process
    cmdline: tuple[str, ...] | None    # None: unreadable (permission, Windows null) — UNKNOWN, not "no marker"
    name: str = ""
    state: str = ""                    # Linux state letter (R, S, D, Z, ...) where known

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, round(self.create_time, 2))

    @cached_property
    def tokens(self) -> frozenset[str]:
        """The argv tokens as a set: computed once per process (the scanner caches Procs across polls),
        so matching a marker against 1,000 processes is 1,000 set lookups."""
        return frozenset(self.cmdline or ())

    def has_token(self, token: str) -> bool:
        return token in self.tokens

    def has_pair(self, flag: str, value: str) -> bool:
        """`flag value` as two whole argv tokens, or `flag=value` as one."""
        tokens = self.tokens
        if f"{flag}={value}" in tokens:
            return True
        if flag not in tokens or value not in tokens:
            return False
        argv = self.cmdline or ()
        return any(a == flag and b == value for a, b in zip(argv, argv[1:]))

    def cmd_text(self, limit: int = 400) -> str:
        if self.cmdline is None:
            return "<cmdline unreadable>"
        text = printable(" ".join(self.cmdline))
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def to_json(self) -> dict:
        return {"pid": self.pid, "ppid": self.ppid, "create_time": self.create_time,
                "cmdline": list(self.cmdline) if self.cmdline is not None else None}


@dataclass(frozen=True)
class ProcTable:
    """A snapshot of a host's processes, or the error that prevented reading it."""

    host: str
    procs: dict[int, Proc] = field(default_factory=dict)
    error: str | None = None
    took_ms: float = 0.0
    at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.error is None

    def evidence(self) -> Evidence:
        return Evidence(what=f"process table of {self.host}", ok=self.ok,
                        detail=f"{len(self.procs)} processes" if self.ok else "",
                        error=self.error, took_ms=self.took_ms, at=self.at)

    def remeasured(self, at: float) -> ProcTable:
        """The same processes, read again at `at` and found unchanged (a remote agent's push): the indexes
        built on this table so far carry over, so the tokens earlier beats asked are not looked up again.
        self.procs must never change: a table is a snapshot."""
        table = ProcTable(self.host, self.procs, self.error, self.took_ms, at)
        for index in ("_by_parent", "_by_token", "derived"):
            if index in self.__dict__:
                table.__dict__[index] = self.__dict__[index]
        return table

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """What callers computed from these processes alone (a side's chain), by their own keys: a table
        found unchanged (remeasured) keeps it, so a quiet host's chains are not traced again each beat."""
        return {}

    @cached_property
    def _by_parent(self) -> dict[int, list[Proc]]:
        index: dict[int, list[Proc]] = {}
        for p in self.procs.values():
            if p.ppid != p.pid:
                index.setdefault(p.ppid, []).append(p)
        return index

    @cached_property
    def _by_token(self) -> dict[str, list[tuple[int, Proc]]]:
        """argv token -> (position in the table, process), for the tokens asked of this table so far: each
        is one pass of set tests over the table, shared by every side's lookups on it (tens of sides each
        scanning every process of a host was most of a beat). Not an index of every token: a table of a
        whole host's processes holds thousands, and a beat asks a few dozen."""
        return {}

    def _with_token(self, token: str) -> list[tuple[int, Proc]]:
        hits = self._by_token.get(token)
        if hits is None:
            hits = self._by_token[token] = [(i, p) for i, p in enumerate(self.procs.values()) if token in p.tokens]
        return hits

    def with_tokens(self, *tokens: str) -> list[Proc]:
        """The processes whose argv holds any of tokens as a whole element, each once, in table order:
        the same list as filtering procs.values() with has_token."""
        hits = [hit for t in tokens for hit in self._with_token(t)]
        if len(tokens) > 1:
            hits = sorted(dict(hits).items())
        return [p for _, p in hits]

    def children(self, pid: int) -> list[Proc]:
        return list(self._by_parent.get(pid, ()))

    def descendants(self, pid: int) -> list[Proc]:
        """Breadth-first, so callers get outer → inner order."""
        out: list[Proc] = []
        frontier = [pid]
        seen = {pid}
        while frontier:
            nxt = []
            for parent in frontier:
                for child in sorted(self.children(parent), key=lambda p: p.create_time):
                    if child.pid not in seen:
                        seen.add(child.pid)
                        out.append(child)
                        nxt.append(child.pid)
            frontier = nxt
        return out

    def ancestors(self, pid: int) -> list[int]:
        out = []
        seen = set()
        cur = self.procs.get(pid)
        while cur is not None and cur.ppid not in seen and cur.ppid > 0:
            seen.add(cur.ppid)
            out.append(cur.ppid)
            cur = self.procs.get(cur.ppid)
        return out


_BOOT_TIME_TTL_S = 60.0
_boot_time_read: tuple[float, float] | None = None   # (monotonic time read, btime)


def _boot_time() -> float:
    """/proc/stat's btime, read again at most once a minute: a poll asked it twice a second (a /proc/stat
    read each), and the kernel only moves it (by a second, when the wall clock is stepped) rarely."""
    global _boot_time_read
    now = time.monotonic()
    if _boot_time_read is not None and now - _boot_time_read[0] < _BOOT_TIME_TTL_S:
        return _boot_time_read[1]
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime"):
                btime = float(line.split()[1])
                _boot_time_read = (now, btime)
                return btime
    raise OSError("btime not found in /proc/stat")


ZOMBIE_LEADER = "Zl"


def stat_state(fields: list[bytes]) -> str:
    """The state of a /proc/PID/stat line's fields after comm (fields[0] is field 3, the state letter).

    A zombie whose other threads still run reads ZOMBIE_LEADER (ps shows it as `Zl`), not Z: its main
    thread has exited, but the process has not, and its threads still hold its sockets (a server's port
    stays open) and its GPU memory. Every `state == "Z"` test means "has exited", so it must not match.
    """
    state = fields[0].decode("ascii", "replace")
    if state == "Z" and int(fields[17]) > 1:   # num_threads: a zombie with nothing left counts only itself
        return ZOMBIE_LEADER
    return state


def parse_stat(raw: bytes, boot_time: float) -> tuple[int, float, str, str]:
    """(ppid, create_time, state, comm) from a /proc/PID/stat line; comm may hold spaces and ')'."""
    lpar, rpar = raw.find(b"("), raw.rfind(b")")
    comm = raw[lpar + 1:rpar].decode("utf-8", "replace")
    fields = raw[rpar + 2:].split(b" ", 20)
    state = stat_state(fields)
    ppid = int(fields[1])
    start_ticks = int(fields[19])
    return ppid, boot_time + start_ticks / _CLK_TCK, state, comm


def _read(path: str, limit: int = 65536) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_proc(pid: int, boot_time: float | None = None) -> Proc | None:
    """Read one process fresh from /proc (no cache). None when it does not exist."""
    bt = boot_time if boot_time is not None else _boot_time()
    try:
        ppid, ctime, state, comm = parse_stat(_read(f"/proc/{pid}/stat", 2048), bt)
    except FileNotFoundError:
        return None
    except ProcessLookupError:
        return None
    try:
        raw = _read(f"/proc/{pid}/cmdline")
        cmdline: tuple[str, ...] | None = tuple(a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")[:-1]) \
            if raw else ()
    except PermissionError:
        cmdline = None
    except (FileNotFoundError, ProcessLookupError):
        return None
    return Proc(pid=pid, ppid=ppid, create_time=ctime, cmdline=cmdline, name=comm, state=state)


def _reread_state(proc: Proc) -> Proc | None:
    """proc with its ppid and state read again from /proc/PID/stat (the same object when neither moved);
    None when it is gone."""
    try:
        raw = _read(f"/proc/{proc.pid}/stat", 2048)
    except (FileNotFoundError, ProcessLookupError):
        return None
    ppid, _, state, _ = parse_stat(raw, 0.0)
    if state == proc.state and ppid == proc.ppid:
        return proc
    return Proc(pid=proc.pid, ppid=ppid, create_time=proc.create_time, cmdline=proc.cmdline, name=proc.name,
                state=state)


class LocalProcScanner:
    """Cached scanner of this machine's /proc; see the module docstring for why the cache is sound."""

    def __init__(self, host: str = "local") -> None:
        self.host = host
        self._boot = _boot_time()
        self._cache: dict[tuple[int, int], Proc] = {}
        self.reads = 0   # cache misses, for the benchmark
        # The last full scan: its /proc listing, its table, and when its youngest process settles. A
        # listing that has not moved since, once every process in it has settled, is the same table
        # (but for the watched processes' state and parent): the loop over each entry is skipped.
        self._listing: list[tuple[str, int]] | None = None
        self._procs: dict[int, Proc] = {}
        self._keys: dict[int, tuple[int, int]] = {}
        self._settled_at = 0.0

    def scan(self, fresh_pids: frozenset[int] = frozenset()) -> ProcTable:
        """fresh_pids: processes whose ppid/state must be re-read now (a side's chain)."""
        t0 = time.perf_counter()
        now = time.time()
        try:
            entries = list(os.scandir("/proc"))
        except OSError as e:
            return ProcTable(self.host, error=f"cannot list /proc: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
        # On Linux a DirEntry's inode comes from the directory listing itself: no system call.
        listing = [(entry.name, entry.inode()) for entry in entries]
        if listing != self._listing or now < self._settled_at:
            self._full(listing, now)
        self._reread_watched(fresh_pids, now)
        return ProcTable(self.host, procs=dict(self._procs), took_ms=(time.perf_counter() - t0) * 1e3)

    def _reread_watched(self, fresh_pids: frozenset[int], now: float) -> None:
        """The watched processes' state and parent, read again. A settled process's cmdline is immutable
        (see above): only those move. A young one was just read whole by _full."""
        procs = self._procs
        for pid in fresh_pids & procs.keys():
            cached = procs[pid]
            if now - cached.create_time < _SETTLE_S:
                continue
            moved = _reread_state(cached)
            if moved is None:   # gone since the listing: the next listing will say so too
                del procs[pid]
                self._cache.pop(self._keys.pop(pid), None)
            elif moved is not cached:
                procs[pid] = self._cache[self._keys[pid]] = moved

    def _full(self, listing: list[tuple[str, int]], now: float) -> None:
        """The table from the listing: cached processes as they were, new and young ones read whole."""
        procs: dict[int, Proc] = {}
        keys: dict[int, tuple[int, int]] = {}
        live: set[tuple[int, int]] = set()
        youngest = 0.0
        for name, inode in listing:
            if not name.isdigit():
                continue
            pid = int(name)
            key = (pid, inode)
            live.add(key)
            cached = self._cache.get(key)
            if cached is None or now - cached.create_time < _SETTLE_S:
                proc = read_proc(pid, self._boot)
                self.reads += 1
                if proc is None:
                    continue
                self._cache[key] = proc
                cached = proc
            procs[pid] = cached
            keys[pid] = key
            youngest = max(youngest, cached.create_time)
        if len(self._cache) > len(live):
            for key in [k for k in self._cache if k not in live]:
                del self._cache[key]
        self._listing, self._procs, self._keys = listing, procs, keys
        self._settled_at = youngest + _SETTLE_S


def parse_proctable_json(host: str, text: str, took_ms: float) -> ProcTable:
    """Output of ops/scripts/proctable.py run on a remote Linux host."""
    try:
        rows = json.loads(text)
        procs = {}
        for row in rows:
            cmd = row["cmdline"]
            procs[int(row["pid"])] = Proc(pid=int(row["pid"]), ppid=int(row["ppid"]),
                                         create_time=float(row["create_time"]),
                                         cmdline=tuple(str(a) for a in cmd) if cmd is not None else None,
                                         name=str(row.get("name", "")), state=str(row.get("state", "")))
    except (ValueError, KeyError, TypeError) as e:
        return ProcTable(host, error=f"unparseable process table ({e}): {text[:300]!r}", took_ms=took_ms)
    return ProcTable(host, procs=procs, took_ms=took_ms)
