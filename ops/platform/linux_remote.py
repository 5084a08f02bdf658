"""The platform of a Linux host reached through a transport (SSH): packaged scripts run from files,
coreutils and `ss`. Every answer is parsed with a bound and every failure is an error with the raw reason.

The verbs a poll repeats every second (process table, stat, read, tail) go to the host's agent
(ops/scripts/agent.py over one channel, ops/platform/remote_agent.py) where the host runs one; a host
whose agent cannot start answers them with the commands below, with the same answers."""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ops.parse.sysinfo import parse_df, parse_meminfo
from ops.platform.base import Platform, ScriptUnavailable
from ops.platform.common import timeout_error
from ops.platform.listeners import parse_ss
from ops.platform.procs import ProcTable, parse_proctable_json
from ops.platform.remote_agent import RemoteAgent
from ops.platform.types import FileStat, FileText, Listeners, SignalOutcome, TcpCheck
from ops.platform.verbs import peer_text, tcp_check
from ops.tristate import Evidence


class LinuxRemote(Platform):
    async def _agent(self, timeout: float) -> tuple[RemoteAgent | None, float]:
        """The host's agent (None: use the commands) and the time left of timeout. Waiting for an agent's
        start takes at most half of it, so the commands still have the other half."""
        running = getattr(self.host, "running_agent", None)
        agent = running() if running is not None else None
        if agent is not None or running is None:
            return agent, timeout
        t0 = time.monotonic()
        agent = await self.host.agent(timeout / 2)   # type: ignore[attr-defined]
        return agent, max(0.0, timeout - (time.monotonic() - t0))

    async def _script(self, name: str, timeout: float) -> str:
        """The packaged script's path on the host, copied there first if need be, within timeout (a
        copy over a hung connection must not hold a probe past its own deadline)."""
        try:
            return await asyncio.wait_for(self.host.script_path(name), timeout)
        except asyncio.TimeoutError:
            raise ScriptUnavailable(f"copy {name} to {self.host.name}: {timeout_error(timeout)}") from None

    async def process_table(self, timeout: float, fresh_pids: frozenset[int] = frozenset(),
                            within_s: float = 0.0) -> ProcTable:
        host = self.host
        agent, timeout = await self._agent(timeout)
        if agent is not None:
            pushed = agent.pushed_table(host.name, within_s, fresh_pids) if within_s > 0 else None
            return pushed if pushed is not None else await agent.process_table(host.name, timeout, fresh_pids)
        t0 = time.perf_counter()
        try:
            script = await self._script("proctable.py", timeout)
        except ScriptUnavailable as e:
            return ProcTable(host.name, error=str(e), took_ms=(time.perf_counter() - t0) * 1e3)
        res = await host.run(["python3", script], timeout=max(0.0, timeout - (time.perf_counter() - t0)))
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return ProcTable(host.name, error=f"process table of {host.name}: {res.why()}", took_ms=took)
        return parse_proctable_json(host.name, res.stdout, took)

    async def signal_if_same(self, pid: int, create_time: float, sig: str, timeout: float,
                             cmdline: tuple[str, ...] | None = None) -> SignalOutcome:
        host = self.host
        t0 = time.monotonic()
        try:
            script = await self._script("signal_if.py", timeout)
        except ScriptUnavailable as e:
            return SignalOutcome("error", str(e))
        timeout = max(0.0, timeout - (time.monotonic() - t0))
        argv = ["python3", script, str(pid), repr(create_time), sig]
        if cmdline is not None:   # the planned argv (as proctable.py decoded it): a process that exec'd is refused
            argv.append(json.dumps(list(cmdline)))
        res = await host.run(argv, timeout=timeout)
        if not res.ok:
            return SignalOutcome("error", res.why())
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
            return SignalOutcome.from_reply(data["outcome"],
                                            str(data.get("error", data.get("detail", data.get("create_time", "")))))
        except (ValueError, KeyError, IndexError) as e:
            return SignalOutcome("error", f"unparseable reply ({e}): {res.stdout[:200]!r}")

    async def listeners(self, timeout: float, interest: Iterable[int] = ()) -> Listeners:
        t0 = time.perf_counter()
        res = await self.host.run(["ss", "-Htlnp"], timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return Listeners(self.host.name, error=f"ss -Htlnp: {res.why()}", took_ms=took)
        return parse_ss(self.host.name, res.stdout, took)

    async def clients_connected(self, port: int, timeout: float) -> tuple[int | None, Evidence]:
        peers, ev = await self.client_peers(port, timeout)
        return (None if peers is None else len(peers)), ev

    async def client_peers(self, port: int, timeout: float) -> tuple[frozenset[str] | None, Evidence]:
        t0 = time.perf_counter()
        what = f"clients of {self.host.name}:{port}"
        res = await self.host.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return None, Evidence(what, False, error=res.why(), took_ms=took)
        rows = [ln.split() for ln in res.stdout.splitlines() if ln.strip()]
        found = frozenset(r[-1] for r in rows)   # the peer address:port column
        return found, Evidence(what, True, detail=f"{len(rows)} established" + peer_text(found), took_ms=took)

    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        return await tcp_check(self.host.tcp_address, port, timeout)

    async def stat_file(self, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
        host = self.host
        agent, timeout = await self._agent(timeout)
        if agent is not None:
            st = (agent.pushed_stat(path, within_s) if within_s > 0 else None) or await agent.stat_file(path, timeout)
            return st if st.error is None else replace(st, error=f"{st.error} (on {host.name})")
        t0 = time.perf_counter()
        # One constant script; the path travels as a positional argument, never pasted into the script.
        res = await host.run(["sh", "-c", 'date +%s.%N; if [ -f "$1" ]; then stat -L -c "%.9Y %s" "$1"; '
                              'elif [ -e "$1" ]; then echo special; else echo missing; fi', "stat_file", path],
                             timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return FileStat(exists=False, error=f"stat {path} on {host.name}: {res.why()}", took_ms=took)
        lines = res.stdout.split("\n")
        try:
            now = float(lines[0])
            if lines[1].strip() == "missing":
                return FileStat(exists=False, host_now=now, took_ms=took)
            if lines[1].strip() == "special":   # a FIFO or a device: no writer's mtime, and a read would block
                return FileStat(exists=True, error=f"{path} on {host.name} is not a regular file", host_now=now,
                                took_ms=took)
            mtime, size = lines[1].split()
            return FileStat(exists=True, mtime=float(mtime), size=int(size), host_now=now, took_ms=took)
        except (ValueError, IndexError):
            return FileStat(exists=False, error=f"stat {path} on {host.name}: unparseable {res.stdout[:200]!r}",
                            took_ms=took)

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        agent, timeout = await self._agent(timeout)
        if agent is not None:
            return await agent.read_text(path, timeout, limit)
        # A regular file only (a FIFO would hold the command until the timeout), at most limit + 1 bytes.
        res = await self.host.run(["sh", "-c", 'if [ ! -e "$1" ]; then echo "No such file" >&2; exit 2; fi; '
                                   'if [ ! -f "$1" ]; then echo "not a regular file: not read" >&2; exit 3; fi; '
                                   'exec head -c "$2" -- "$1"', "read_text", path, str(limit + 1)], timeout=timeout)
        if not res.ok:
            if "No such file" in res.stderr:
                return FileText(None, missing=True)
            return FileText(None, error=f"read {path} on {self.host.name}: {res.why()}")
        if len(res.stdout) > limit:
            return FileText(None, error=f"{path} is larger than {limit} bytes")
        return FileText(res.stdout)

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        agent, timeout = await self._agent(timeout)
        if agent is not None:
            return await agent.tail_lines(path, n, timeout, max_bytes)
        res = await self.host.run(["sh", "-c", '[ -f "$1" ] || exit 3; exec tail -c "$2" -- "$1" | tail -n "$3"',
                                   "tail_lines", path, str(max_bytes), str(n)], timeout=timeout)
        return res.stdout.splitlines()[-n:] if res.ok else None

    async def memory(self, timeout: float) -> tuple[int, int] | str:
        res = await self.host.run(["cat", "/proc/meminfo"], timeout=timeout)
        return parse_meminfo(res.stdout) if res.ok else f"/proc/meminfo on {self.host.name}: {res.why()}"

    async def disk_free(self, paths: Sequence[str], timeout: float) -> dict[str, tuple[str, int, int] | str]:
        dirs = [os.path.dirname(p) or "/" for p in paths]
        res = await self.host.run(["df", "-Pk", "--", *dirs], timeout=timeout)
        rows = parse_df(res.stdout) if res.rc is not None else {}
        if len(rows) != len(paths):
            return {p: f"df on {self.host.name}: {res.why()}" for p in paths}
        return {p: rows[str(i)] for i, p in enumerate(paths)}
