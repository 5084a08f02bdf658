"""The console's end of a remote host's agent (ops/scripts/agent.py): requests over one long-lived exec
channel instead of a remote exec per probe.

Every request is bounded here in time (the caller's timeout) and in bytes (a reply frame over
`max_frame` ends the agent). A request that times out leaves its thread in the agent (a hung filesystem
call holds that one only); once `max_stuck` requests are unanswered past their deadline the agent is
dropped, and the host starts a new one on its next call. An agent that ends (EOF, the connection lost)
fails every request still waiting with the reason. The process table arrives as a change set against
the last one applied here: unchanged processes keep their Proc objects (and their cached argv tokens).
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack

from ops.platform.common import decode, timeout_error
from ops.platform.procs import Proc, ProcTable
from ops.platform.types import FileStat, FileText

MAX_FRAME = 32 * 1024 * 1024   # a full process table of ~100,000 processes; a read is capped below it
STDERR_KEEP = 2048


class AgentError(Exception):
    """A request the agent did not answer (timeout, the agent gone, a broken frame): the raw reason."""


class AgentStream:
    """What the agent needs of an asyncssh process (so tests can drive it over local pipes too)."""

    def __init__(self, write: Callable[[bytes], None], readexactly: Callable[[int], Awaitable[bytes]],
                 read_err: Callable[[int], Awaitable[bytes]], close: Callable[[], None]) -> None:
        self.write, self.readexactly, self.read_err, self.close = write, readexactly, read_err, close


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
        self._seq: int | None = None
        self._procs: dict[int, Proc] = {}

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
        if self.closed is not None:
            raise AgentError(f"{self.where}: {self.closed}")
        rid = next(self._ids)
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
                value = await self.request("proctable", {"base": self._seq, "fresh": sorted(fresh_pids)}, left)
                procs = self._apply(value)
            except AgentError as e:
                return ProcTable(host, error=f"process table of {host}: {e}", took_ms=(time.perf_counter() - t0) * 1e3)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                self._seq = None
                return ProcTable(host, error=f"process table of {host}: {self.where}: unparseable reply ({e})",
                                 took_ms=(time.perf_counter() - t0) * 1e3)
        finally:
            self._table_lock.release()
        return ProcTable(host, procs=procs, took_ms=(time.perf_counter() - t0) * 1e3)

    def _apply(self, value: dict) -> dict[int, Proc]:
        base = value["base"]
        if base is None:
            procs: dict[int, Proc] = {}
        elif base == self._seq:
            procs = self._procs
        else:
            raise ValueError(f"a change set against table {base}, this end holds {self._seq}")
        self._seq = None   # until the whole reply is applied
        for pid in value["gone"]:
            procs.pop(int(pid), None)
        for pid, ppid, state, create_time, name, cmd in value["rows"]:
            procs[int(pid)] = Proc(pid=int(pid), ppid=int(ppid), create_time=float(create_time),
                                   cmdline=tuple(str(a) for a in cmd) if cmd is not None else None,
                                   name=str(name), state=str(state))
        if len(procs) != value["count"]:
            raise ValueError(f"{len(procs)} processes after the change set, the agent has {value['count']}")
        self._procs, self._seq = procs, int(value["seq"])
        return dict(procs)

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
