"""The console's end of a remote host's agent (ops/scripts/agent.py): requests over one long-lived exec
channel instead of a remote exec per probe.

Every request is bounded here in time (the caller's timeout) and in bytes (a reply frame over
`max_frame` ends the agent). A request that times out leaves its thread in the agent (a hung filesystem
call holds that one only); once `max_stuck` requests are unanswered past their deadline the agent is
dropped, and the host starts a new one on its next call. An agent that ends (EOF, the connection lost)
fails every request still waiting with the reason. The process table arrives as a change set against
the last one applied here: unchanged processes keep their Proc objects (and their cached argv tokens).

A display's beat may take what the agent pushed (`pushed_table`, `pushed_stat`, with `within_s`): what it
asks for that way is watched from then on (the agent's `watch`), and a push younger than within_s answers
it with no round trip. Anything older, not yet watched or not pushed is asked for as a request.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from ops.platform.common import decode, timeout_error
from ops.platform.procs import Proc, ProcTable
from ops.platform.types import FileStat, FileText

# A path, or the table, not asked for by a beat within this long is no longer watched.
WATCH_EXPIRE_S = 30.0
# Pushes come this often within a beat's within_s: a beat always finds one younger than within_s, with
# room for a push's jitter (the agent's thread, the SSH channel). With a display's within_s of 1.5 poll
# periods (ops/probes/prober.py display_within_s), one push a period.
PUSH_SHARE = 2 / 3
# After a watch the agent refused (an older agent, a broken spec), requests only, for this long.
WATCH_RETRY_S = 30.0
MAX_FRAME = 32 * 1024 * 1024   # a full process table of ~100,000 processes; a read is capped below it
STDERR_KEEP = 2048


class AgentError(Exception):
    """A request the agent did not answer (timeout, the agent gone, a broken frame): the raw reason."""


class AgentStream:
    """What the agent needs of an asyncssh process (so tests can drive it over local pipes too)."""

    def __init__(self, write: Callable[[bytes], None], readexactly: Callable[[int], Awaitable[bytes]],
                 read_err: Callable[[int], Awaitable[bytes]], close: Callable[[], None]) -> None:
        self.write, self.readexactly, self.read_err, self.close = write, readexactly, read_err, close


class TableMirror:
    """The process table one stream of change sets has built (requests and pushes each keep one)."""

    def __init__(self) -> None:
        self.seq: int | None = None
        self.procs: dict[int, Proc] = {}

    def apply(self, value: dict) -> dict[int, Proc]:
        base = value["base"]
        if base is None:
            procs: dict[int, Proc] = {}
        elif base == self.seq:
            procs = self.procs
        else:
            raise ValueError(f"a change set against table {base}, this end holds {self.seq}")
        self.seq = None   # until the whole change set is applied
        for pid in value["gone"]:
            procs.pop(int(pid), None)
        for pid, ppid, state, create_time, name, cmd in value["rows"]:
            proc = Proc(pid=int(pid), ppid=int(ppid), create_time=float(create_time),
                        cmdline=tuple(str(a) for a in cmd) if cmd is not None else None,
                        name=str(name), state=str(state))
            old = procs.get(proc.pid)
            if old is not None and old.cmdline == proc.cmdline and "tokens" in old.__dict__:
                # A watched process re-read with a new state (R, S): its argv tokens are the same set.
                proc.__dict__["tokens"] = old.__dict__["tokens"]
            procs[proc.pid] = proc
        if len(procs) != value["count"]:
            raise ValueError(f"{len(procs)} processes after the change set, the agent has {value['count']}")
        self.procs, self.seq = procs, int(value["seq"])
        return procs


@dataclass(frozen=True)
class WatchSpec:
    period: float
    paths: frozenset[str]
    table: bool
    fresh: frozenset[int]


def pushed_file_stat(path: str, key: Any, host_now: float) -> FileStat:
    """A pushed [kind, mtime, size] (or ["error", reason]) as the FileStat a stat request answers."""
    kind = key[0]
    if kind == "missing":
        return FileStat(exists=False, host_now=host_now)
    if kind == "special":
        return FileStat(exists=True, error=f"{path} is not a regular file", host_now=host_now)
    if kind == "file":
        return FileStat(exists=True, mtime=float(key[1]), size=int(key[2]), host_now=host_now)
    return FileStat(exists=False, error=f"stat {path}: {key[1] if len(key) > 1 else key!r} (pushed)")


class RemoteAgent:
    def __init__(self, stream: AgentStream, where: str, *, max_frame: int = MAX_FRAME, max_stuck: int = 4) -> None:
        self.stream = stream
        self.where = where           # "agent on HOST" in every error
        self.max_frame = max_frame
        self.max_stuck = max_stuck
        self.pid: int | None = None
        self.codec = ""
        self.stuck = 0               # requests past their deadline and still unanswered
        self.closed: str | None = None   # why the agent is no longer usable
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._late: set[int] = set()
        self._stderr = b""
        # Requests of one loop iteration (a beat's sides ask at once) leave in one write: one SSH packet
        # to encrypt and send instead of one each.
        self._outbox: list[bytes] = []
        self._flush_at: asyncio.Handle | None = None
        self._reader = asyncio.ensure_future(self._read_loop())
        self._err_reader = asyncio.ensure_future(self._read_stderr())
        # The process table this end holds: the agent's reply `seq` it equals, and its processes.
        self._table_lock = asyncio.Lock()
        self._requested = TableMirror()
        # What the pushes have told: the last push's arrival (monotonic here) and the host's clock then;
        # each watched path's stat with the id of the spec that added it (valid once a push of that spec
        # or a later one came); the pushed table.
        self._push_at: float | None = None
        self._push_now = 0.0
        self._push_wid = 0
        self._pushed_stats: dict[str, Any] = {}
        self._pushed = TableMirror()
        self._pushed_ok = False
        self._pushed_moves = 0   # change sets that changed the pushed table (a push of an unchanged one does not)
        self._handed: tuple[int, ProcTable] | None = None   # the last table handed out, at which _pushed_moves
        # What beats have asked for (path or "table" -> when), the spec the agent has, and since which spec
        # id each part of it holds.
        self._wants: dict[str, float] = {}
        self._want_fresh: frozenset[int] = frozenset()
        self._want_period = 1.0
        self._spec: WatchSpec | None = None
        self._since: dict[str, int] = {}
        self._spec_sending = False
        self._spec_reset = False
        self._spec_checked = 0.0
        self.watch_error: tuple[float, str] | None = None
        self.pushes = 0   # pushes applied (tests and the benchmark)
        self.asked: Counter[str] = Counter()   # requests sent, by op (tests and the benchmark)

    @property
    def usable(self) -> bool:
        return self.closed is None

    # -- framing ------------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        why = "the agent's output ended"
        try:
            while True:
                (n,) = struct.unpack(">I", await self.stream.readexactly(4))
                if n > self.max_frame:
                    why = f"a reply of {n} bytes (over {self.max_frame})"
                    break
                msg = msgpack.unpackb(await self.stream.readexactly(n), raw=False)
                if isinstance(msg, dict) and "push" in msg:
                    self._on_push(msg)
                    continue
                rid = msg.get("id") if isinstance(msg, dict) else None
                if rid in self._late:
                    self._late.discard(rid)
                    self.stuck = max(0, self.stuck - 1)
                fut = self._waiting.pop(rid, None) if isinstance(rid, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except asyncio.IncompleteReadError:
            pass
        except asyncio.CancelledError:
            self._fail("closed by the console")
            raise
        except Exception as e:   # a broken frame or a lost channel: the reason is the evidence
            why = f"{type(e).__name__}: {e}"
        # An agent that ended says why on stderr (python3's own "can't open file", a traceback): let it.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._err_reader), 1.0)
        self._fail(why)

    async def _read_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                chunk = await self.stream.read_err(4096)
                if not chunk:
                    return
                self._stderr = (self._stderr + chunk)[-STDERR_KEEP:]

    def _fail(self, why: str) -> None:
        if self.closed is None:
            err = decode(self._stderr).strip()
            self.closed = why + (f"; its stderr: {err[-300:]}" if err else "")
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(AgentError(f"{self.where}: {self.closed}"))
        self._waiting.clear()
        with contextlib.suppress(Exception):
            self.stream.close()

    def close(self, why: str = "closed by the console") -> None:
        self._reader.cancel()
        self._err_reader.cancel()
        self._fail(why)

    def _flush(self) -> None:
        self._flush_at = None
        data, self._outbox = b"".join(self._outbox), []
        if self.closed is not None:
            return
        try:
            self.stream.write(data)
        except Exception as e:   # the channel is gone: whatever waits learns it now
            self._fail(f"write: {type(e).__name__}: {e}")

    async def request(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        """The value of one request; AgentError with the raw reason otherwise. Never waits past timeout."""
        return await self._request_as(next(self._ids), op, args, timeout)

    async def _request_as(self, rid: int, op: str, args: dict[str, Any], timeout: float) -> Any:
        if self.closed is not None:
            raise AgentError(f"{self.where}: {self.closed}")
        self.asked[op] += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            body = msgpack.packb({"id": rid, "op": op, "args": args}, use_bin_type=True)
        except Exception as e:
            self._waiting.pop(rid, None)
            raise AgentError(f"{self.where}: {op}: {type(e).__name__}: {e}") from e
        self._outbox.append(struct.pack(">I", len(body)) + body)
        if self._flush_at is None:
            self._flush_at = asyncio.get_running_loop().call_soon(self._flush)
        try:
            # fut is this request's alone: wait_for may cancel it (the reader skips a future that is done).
            msg = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self._late.add(rid)
            self._waiting.pop(rid, None)
            self.stuck += 1
            if self.stuck >= self.max_stuck:
                self.close(f"{self.stuck} requests unanswered past their deadline (a hung call?)")
            raise AgentError(f"{self.where}: {op}: {timeout_error(timeout)}") from None
        except asyncio.CancelledError:
            self._waiting.pop(rid, None)
            raise
        if not msg.get("ok"):
            raise AgentError(f"{self.where}: {op}: {msg.get('error')}")
        return msg.get("value")

    # -- the verbs ----------------------------------------------------------------------------------

    async def hello(self, timeout: float) -> None:
        value = await self.request("hello", {}, timeout)
        self.pid, self.codec = int(value["pid"]), str(value.get("codec", ""))

    async def process_table(self, host: str, timeout: float, fresh_pids: frozenset[int]) -> ProcTable:
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        try:
            # One table request at a time: each change set is against the table the previous one left.
            await asyncio.wait_for(self._table_lock.acquire(), timeout)
        except asyncio.TimeoutError:
            return ProcTable(host, error=f"process table of {host}: {self.where}: {timeout_error(timeout)}",
                             took_ms=(time.perf_counter() - t0) * 1e3)
        try:
            left = max(0.0, deadline - time.monotonic())
            try:
                value = await self.request("proctable", {"base": self._requested.seq, "fresh": sorted(fresh_pids)},
                                           left)
                procs = dict(self._requested.apply(value))
            except AgentError as e:
                return ProcTable(host, error=f"process table of {host}: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                self._requested.seq = None
                return ProcTable(host, error=f"process table of {host}: {self.where}: unparseable reply ({e})",
                                 took_ms=(time.perf_counter() - t0) * 1e3)
        finally:
            self._table_lock.release()
        return ProcTable(host, procs=procs, took_ms=(time.perf_counter() - t0) * 1e3)

    async def stat_file(self, path: str, timeout: float) -> FileStat:
        t0 = time.perf_counter()
        try:
            v = await self.request("stat", {"path": path}, timeout)
            took = (time.perf_counter() - t0) * 1e3
            now = float(v["now"])
            if v["kind"] == "missing":
                return FileStat(exists=False, host_now=now, took_ms=took)
            if v["kind"] == "special":
                return FileStat(exists=True, error=f"{path} is not a regular file", host_now=now, took_ms=took)
            return FileStat(exists=True, mtime=float(v["mtime"]), size=int(v["size"]), host_now=now, took_ms=took)
        except AgentError as e:
            return FileStat(exists=False, error=f"stat {path}: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
        except (KeyError, TypeError, ValueError) as e:
            return FileStat(exists=False, error=f"stat {path}: {self.where}: unparseable reply ({e})",
                            took_ms=(time.perf_counter() - t0) * 1e3)

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        try:
            v = await self.request("read", {"path": path, "limit": limit}, timeout)
            if v.get("missing"):
                return FileText(None, missing=True)
            data = v["data"]
            if not isinstance(data, bytes):
                raise TypeError(f"data is {type(data).__name__}")
        except AgentError as e:
            return FileText(None, error=f"read {path}: {e}")
        except (KeyError, TypeError, AttributeError) as e:
            return FileText(None, error=f"read {path}: {self.where}: unparseable reply ({e})")
        if len(data) > limit:
            return FileText(None, error=f"{path} is larger than {limit} bytes")
        return FileText(decode(data))

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        try:
            v = await self.request("tail", {"path": path, "max_bytes": max_bytes}, timeout)
            data = v.get("data")
        except (AgentError, AttributeError):
            return None
        if not isinstance(data, bytes):
            return None
        return decode(data).splitlines()[-n:] if n > 0 else []

    # -- pushes -------------------------------------------------------------------------------------

    def _on_push(self, msg: dict) -> None:
        try:
            wid, now = int(msg["push"]), float(msg["now"])
            for path, key in dict(msg.get("stats") or {}).items():
                if not isinstance(key, list) or not key:
                    raise ValueError(f"stat of {path!r} is {key!r}")
                self._pushed_stats[str(path)] = key
            if "table" in msg:
                try:
                    change = msg["table"]
                    self._pushed.apply(change)
                    self._pushed_ok = True
                    if change["base"] is None or change["rows"] or change["gone"]:
                        self._pushed_moves += 1
                except (KeyError, TypeError, ValueError, IndexError):
                    # Lost track of the pushed table: requests until the agent sends it whole again.
                    self._pushed_ok, self._spec_reset = False, True
        except (KeyError, TypeError, ValueError, AttributeError):
            self._push_at = None   # a push that cannot be read: nothing pushed is trusted until the next
            return
        self._push_at, self._push_now, self._push_wid = time.monotonic(), now, wid
        self.pushes += 1
        if self._push_at - self._spec_checked > WATCH_EXPIRE_S / 4:
            # What no beat asks for any more is dropped from the watch (all of it: the agent stops pushing).
            self._spec_checked = self._push_at
            self._send_spec()

    def _fresh_push(self, within_s: float, part: str) -> bool:
        """A push younger than within_s came, of a spec that already held `part`."""
        at = self._push_at
        return (at is not None and time.monotonic() - at <= within_s
                and part in self._since and self._push_wid >= self._since[part])

    def pushed_stat(self, path: str, within_s: float) -> FileStat | None:
        """path's stat as the last push measured it, if younger than within_s (None: ask). Watched from now."""
        self._want(path, within_s)
        if not self._fresh_push(within_s, path):
            return None
        key = self._pushed_stats.get(path)
        return None if key is None else pushed_file_stat(path, key, self._push_now)

    def pushed_table(self, host: str, within_s: float, fresh_pids: frozenset[int]) -> ProcTable | None:
        """The process table as the last push read it, if younger than within_s and with fresh_pids re-read
        in it (None: ask). Watched from now."""
        self._want_fresh = fresh_pids
        self._want("table", within_s)
        if not (self._pushed_ok and self._fresh_push(within_s, "table") and self._spec is not None
                and fresh_pids <= self._spec.fresh):
            return None
        assert self._push_at is not None
        at = time.time() - (time.monotonic() - self._push_at)   # when the push came, on this clock
        handed = self._handed
        if handed is not None and handed[0] == self._pushed_moves and handed[1].host == host:
            table = handed[1].remeasured(at)
        else:
            table = ProcTable(host, procs=dict(self._pushed.procs), at=at)
        self._handed = (self._pushed_moves, table)
        return table

    def _want(self, part: str, within_s: float) -> None:
        now = time.monotonic()
        known = part in self._wants
        self._wants[part] = now
        self._want_period = within_s * PUSH_SHARE
        if known and now - self._spec_checked < WATCH_EXPIRE_S / 4 and self._spec is not None and (
                part != "table" or self._want_fresh <= self._spec.fresh):
            return
        self._spec_checked = now
        self._send_spec()

    def _send_spec(self) -> None:
        if self._spec_sending or self.closed is not None:
            return
        err = self.watch_error
        if err is not None and time.monotonic() - err[0] < WATCH_RETRY_S:
            return
        now = time.monotonic()
        for part in [p for p, t in self._wants.items() if now - t > WATCH_EXPIRE_S]:
            del self._wants[part]
        table = "table" in self._wants
        spec = WatchSpec(round(self._want_period, 3), frozenset(p for p in self._wants if p != "table"), table,
                         self._want_fresh if table else frozenset())
        if spec == self._spec and not self._spec_reset:
            return
        self._spec_sending = True
        task = asyncio.ensure_future(self._watch(spec, self._spec_reset))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _watch(self, spec: WatchSpec, reset: bool) -> None:
        rid = next(self._ids)   # the agent tags its pushes with the id of the spec they follow
        old = self._spec
        try:
            await self._request_as(rid, "watch", {"period": spec.period, "paths": sorted(spec.paths),
                                                  "table": spec.table, "fresh": sorted(spec.fresh),
                                                  "reset": reset}, 10.0)
        except AgentError as e:
            self.watch_error = (time.monotonic(), str(e))
            return
        finally:
            self._spec_sending = False
        if reset:
            self._spec_reset = False
        self._spec = spec
        # A part the last spec already had stays valid; a new one (and the table when its pids grew, or
        # after a reset) is valid from this spec's pushes on.
        for part in spec.paths | ({"table"} if spec.table else set()):
            grew = part == "table" and (old is None or not spec.fresh <= old.fresh or reset)
            if old is None or grew or part not in (old.paths | ({"table"} if old.table else set())):
                self._since[part] = rid
        for part in [p for p in self._since if p not in spec.paths and not (p == "table" and spec.table)]:
            del self._since[part]
            self._pushed_stats.pop(part, None)
        self._send_spec()   # what was asked while this one was on its way
