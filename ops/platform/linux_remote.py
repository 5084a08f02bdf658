"""The platform of a Linux host reached through a transport (SSH): packaged scripts run from files,
coreutils and `ss`. Every answer is parsed with a bound and every failure is an error with the raw reason."""
from __future__ import annotations

import json
import time
from collections.abc import Iterable

from ops.platform.base import Platform, ScriptUnavailable
from ops.platform.listeners import parse_ss
from ops.platform.procs import ProcTable, parse_proctable_json
from ops.platform.types import FileStat, FileText, Listeners, SignalOutcome, TcpCheck
from ops.platform.verbs import tcp_check
from ops.tristate import Evidence


class LinuxRemote(Platform):
    async def process_table(self, timeout: float, fresh_pids: frozenset[int] = frozenset()) -> ProcTable:
        host = self.host
        t0 = time.perf_counter()
        try:
            script = await host.script_path("proctable.py")
        except ScriptUnavailable as e:
            return ProcTable(host.name, error=str(e), took_ms=(time.perf_counter() - t0) * 1e3)
        res = await host.run(["python3", script], timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return ProcTable(host.name, error=f"process table of {host.name}: {res.why()}", took_ms=took)
        return parse_proctable_json(host.name, res.stdout, took)

    async def signal_if_same(self, pid: int, create_time: float, sig: str, timeout: float) -> SignalOutcome:
        host = self.host
        try:
            script = await host.script_path("signal_if.py")
        except ScriptUnavailable as e:
            return SignalOutcome("error", str(e))
        res = await host.run(["python3", script, str(pid), repr(create_time), sig], timeout=timeout)
        if not res.ok:
            return SignalOutcome("error", res.why())
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
            return SignalOutcome.from_reply(data["outcome"], str(data.get("error", data.get("create_time", ""))))
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
        t0 = time.perf_counter()
        what = f"clients of {self.host.name}:{port}"
        res = await self.host.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return None, Evidence(what, False, error=res.why(), took_ms=took)
        n = len([ln for ln in res.stdout.splitlines() if ln.strip()])
        return n, Evidence(what, True, detail=f"{n} established", took_ms=took)

    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        return await tcp_check(self.host.tcp_address, port, timeout)

    async def stat_file(self, path: str, timeout: float) -> FileStat:
        host = self.host
        t0 = time.perf_counter()
        # One constant script; the path travels as a positional argument, never pasted into the script.
        res = await host.run(["sh", "-c", 'date +%s.%N; if [ -e "$1" ]; then stat -c "%.9Y %s" "$1"; '
                              'else echo missing; fi', "stat_file", path], timeout=timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return FileStat(exists=False, error=f"stat {path} on {host.name}: {res.why()}", took_ms=took)
        lines = res.stdout.split("\n")
        try:
            now = float(lines[0])
            if lines[1].strip() == "missing":
                return FileStat(exists=False, host_now=now, took_ms=took)
            mtime, size = lines[1].split()
            return FileStat(exists=True, mtime=float(mtime), size=int(size), host_now=now, took_ms=took)
        except (ValueError, IndexError):
            return FileStat(exists=False, error=f"stat {path} on {host.name}: unparseable {res.stdout[:200]!r}",
                            took_ms=took)

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        res = await self.host.run(["head", "-c", str(limit + 1), path], timeout=timeout)
        if not res.ok:
            if "No such file" in res.stderr:
                return FileText(None, missing=True)
            return FileText(None, error=f"read {path} on {self.host.name}: {res.why()}")
        if len(res.stdout) > limit:
            return FileText(None, error=f"{path} is larger than {limit} bytes")
        return FileText(res.stdout)

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        res = await self.host.run(["tail", "-n", str(n), path], timeout=timeout)
        return res.stdout.splitlines()[-n:] if res.ok else None
