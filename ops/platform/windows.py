"""The PowerShell command set for hosts with `os: windows` (ssh to Windows OpenSSH, or WSL interop).

Every script goes through the host's `run_powershell` (an -EncodedCommand runspace with its own deadline,
see ops/platform/powershell.py), so no value we put in a script is ever re-parsed by cmd.exe or by
PowerShell's native-argument quoting. Values are numbers we format ourselves; nothing from config or
user input is pasted into a script here.

- process table: Win32_Process (ProcessId, ParentProcessId, CommandLine, CreationDate) as JSON, wrapped in
  @(...) so one process is still an array; `-Depth 3` so a CreationDate that comes out as an object
  ({value, DisplayHint, DateTime}, 5.1) is not flattened to a type name. CommandLine null (another user's
  process without elevation) stays None: UNKNOWN, never "no marker".
- stop one process: by id only (`Stop-Process -Id`, never -Name: both sides' servers have the same image
  name), after re-reading its CreationDate on the host in the same script. Windows has no SIGTERM: both
  TERM and KILL are TerminateProcess (`-Force`), the guard's grace just finds it gone sooner.
- listening ports / clients: Get-NetTCPConnection. It reports "no objects found" as an error
  (ObjectNotFound); that one error means zero rows, any other error is an error.
- start a detached server: the host's spawn_detached (Win32_Process.Create via CIM, not Start-Process:
  a process started with Start-Process inside an OpenSSH session belongs to the session's job object and
  is killed when the session closes; WMI starts it outside that job and returns its pid).
- netsh and nvidia-smi are native programs: they run through `host.run(argv)` like on any host
  (ops/probes/ports.py, ops/probes/vram.py), which on Windows starts them with exact argv quoting.
"""
from __future__ import annotations

import json
import ntpath
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ops.parse.errors import ParseError
from ops.parse.sysinfo import parse_windows_memory
from ops.parse.winproc import WinProc, parse_win_processes
from ops.platform.base import Host, Platform, Result
from ops.platform.procs import Proc, ProcTable
from ops.platform.types import FileStat, FileText, Listeners, SignalOutcome, TcpCheck
from ops.platform.verbs import tcp_check
from ops.tristate import Evidence

PROCESS_SCRIPT = ("ConvertTo-Json -Depth 3 -Compress -InputObject @(Get-CimInstance Win32_Process | "
                  "Select-Object ProcessId,ParentProcessId,CommandLine,CreationDate)")

# Zero rows from Get-NetTCPConnection arrive as an ObjectNotFound error: turn exactly that into @().
_NETTCP_ROWS = ("$rows = @(try {{ Get-NetTCPConnection {args} -ErrorAction Stop }} "
                "catch {{ if ($_.CategoryInfo.Category -ne 'ObjectNotFound') {{ throw }} }})")

LISTEN_SCRIPT = "\n".join([
    _NETTCP_ROWS.format(args="-State Listen"),
    "ConvertTo-Json -Depth 2 -Compress -InputObject @($rows | Select-Object LocalAddress,LocalPort,OwningProcess)",
])

WINDOWS_MEMORY_SCRIPT = ("Get-CimInstance Win32_OperatingSystem | Select-Object FreePhysicalMemory,"
                         "TotalVisibleMemorySize | ConvertTo-Json -Compress")

# Tolerance of the identity re-check: CreationDate comes with at least ms precision in every form.
CREATE_TOLERANCE_MS = 50


# ------------------------------------------------------------------------------------------ processes

def to_proc(w: WinProc) -> Proc:
    argv = w.argv
    name = ntpath.basename(argv[0]) if argv else ""
    # A missing CreationDate (System Idle) becomes 0.0: no identity re-check can ever match it, so such a
    # process can never be a target (fail-closed), while it still shows in the table.
    return Proc(pid=w.pid, ppid=w.ppid if w.ppid is not None else 0,
                create_time=w.create_time if w.create_time is not None else 0.0,
                cmdline=argv, name=name)


def table_from_json(host_name: str, text: str, took_ms: float = 0.0) -> ProcTable:
    parsed = parse_win_processes(text)
    if isinstance(parsed, ParseError):
        return ProcTable(host_name, error=f"{parsed.reason}: {parsed.text[:200]!r}", took_ms=took_ms)
    return ProcTable(host_name, procs={w.pid: to_proc(w) for w in parsed}, took_ms=took_ms)


def stop_script(pid: int, create_time: float) -> str:
    """Stop pid only if its CreationDate is still create_time (ms since the epoch, UTC)."""
    pid = int(pid)
    expected = int(round(float(create_time) * 1000))
    return "\n".join([
        f"$id = {pid}",
        f"$expected = {expected}",
        "$p = Get-CimInstance Win32_Process -Filter \"ProcessId = $id\"",
        "if ($null -eq $p) { '{\"outcome\":\"gone\"}'; return }",
        "if ($null -eq $p.CreationDate) { '{\"outcome\":\"changed\",\"detail\":\"no CreationDate\"}'; return }",
        "$ms = ([DateTimeOffset]$p.CreationDate).ToUnixTimeMilliseconds()",
        f"if ([Math]::Abs($ms - $expected) -gt {CREATE_TOLERANCE_MS}) "
        "{ '{\"outcome\":\"changed\",\"create_ms\":' + $ms + '}'; return }",
        "try { Stop-Process -Id $id -Force -ErrorAction Stop }",
        "catch [Microsoft.PowerShell.Commands.ProcessCommandException] { '{\"outcome\":\"gone\"}'; return }",
        "'{\"outcome\":\"sent\"}'",
    ])


# ------------------------------------------------------------------------------------------ tcp

def _rows(text: str) -> list[dict]:
    data = json.loads(text) if text.strip() else []
    rows = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError("rows are not objects")
    return rows


def listeners_from_json(host_name: str, text: str, took_ms: float = 0.0) -> Listeners:
    try:
        ports: dict[int, set[int | None]] = {}
        for r in _rows(text):
            owner = r.get("OwningProcess")
            ports.setdefault(int(r["LocalPort"]), set()).add(int(owner) if owner is not None else None)
    except (ValueError, KeyError, TypeError) as e:
        return Listeners(host_name, error=f"unparseable Get-NetTCPConnection output ({e}): {text[:200]!r}",
                         took_ms=took_ms)
    return Listeners(host_name, {p: frozenset(o) for p, o in ports.items()}, took_ms=took_ms)


def clients_script(port: int) -> str:
    return "\n".join([
        _NETTCP_ROWS.format(args=f"-LocalPort {int(port)} -State Established"),
        "ConvertTo-Json -Depth 2 -Compress -InputObject "
        "@($rows | Select-Object RemoteAddress,RemotePort,OwningProcess)",
    ])


class Windows(Platform):
    """Every call is one PowerShell script through the host's `run_powershell` (ssh to Windows OpenSSH,
    or WSL interop)."""

    def __init__(self, host: Host, run_powershell: Callable[[str, float], Awaitable[Result]]) -> None:
        super().__init__(host)
        self._run_powershell = run_powershell

    async def _ps(self, script: str, timeout: float) -> Result:
        return await self._run_powershell(script, timeout)

    async def process_table(self, timeout: float, fresh_pids: frozenset[int] = frozenset(),
                            within_s: float = 0.0) -> ProcTable:
        t0 = time.perf_counter()
        res = await self._ps(PROCESS_SCRIPT, timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return ProcTable(self.host.name, error=f"Win32_Process on {self.host.name}: {res.why()}", took_ms=took)
        return table_from_json(self.host.name, res.stdout, took)

    async def signal_if_same(self, pid: int, create_time: float, sig: str, timeout: float,
                             cmdline: tuple[str, ...] | None = None) -> SignalOutcome:
        # Windows has no exec(): a pid with its creation date is one program for its whole life, so the
        # (pid, creation date) check on the host is the whole identity check there.
        res = await self._ps(stop_script(pid, create_time), timeout)
        if not res.ok:
            return SignalOutcome("error", res.why())
        line = next((ln for ln in reversed(res.stdout.strip().splitlines()) if ln.strip().startswith("{")), "")
        try:
            data = json.loads(line)
            outcome = str(data["outcome"])
        except (ValueError, KeyError, TypeError) as e:
            return SignalOutcome("error", f"unparseable reply ({e}): {res.stdout[:200]!r}")
        if outcome not in ("sent", "gone", "changed"):
            return SignalOutcome("error", f"unexpected outcome {outcome!r}")
        detail = f"pid {pid} now started at {data['create_ms'] / 1000:.3f}" if "create_ms" in data else \
            str(data.get("detail", ""))
        return SignalOutcome.from_reply(outcome, detail)

    async def listeners(self, timeout: float, interest: Iterable[int] = ()) -> Listeners:
        t0 = time.perf_counter()
        res = await self._ps(LISTEN_SCRIPT, timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return Listeners(self.host.name, error=f"Get-NetTCPConnection on {self.host.name}: {res.why()}", took_ms=took)
        return listeners_from_json(self.host.name, res.stdout, took)

    async def clients_connected(self, port: int, timeout: float) -> tuple[int | None, Evidence]:
        t0 = time.perf_counter()
        what = f"clients of {self.host.name}:{port}"
        res = await self._ps(clients_script(port), timeout)
        took = (time.perf_counter() - t0) * 1e3
        if not res.ok:
            return None, Evidence(what, False, error=res.why(), took_ms=took)
        try:
            rows = _rows(res.stdout)
        except ValueError as e:
            return None, Evidence(what, False, error=f"unparseable reply ({e}): {res.stdout[:200]!r}", took_ms=took)
        peers = ", ".join(f"{r.get('RemoteAddress')}:{r.get('RemotePort')}" for r in rows)
        return len(rows), Evidence(what, True, detail=f"{len(rows)} established" + (f" ({peers})" if peers else ""),
                                   took_ms=took)

    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        return await tcp_check(self.host.tcp_address, port, timeout)

    # A Windows host holds the CARLA server; the evaluator's files live on Linux hosts.
    async def stat_file(self, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
        return FileStat(exists=False, error=f"reading files on the Windows host {self.host.name} is not supported")

    async def read_text(self, path: str, timeout: float, limit: int) -> FileText:
        return FileText(None, error=f"reading files on the Windows host {self.host.name} is not supported")

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        return None

    async def memory(self, timeout: float) -> tuple[int, int] | str:
        res = await self._ps(WINDOWS_MEMORY_SCRIPT, timeout)
        return parse_windows_memory(res.stdout) if res.ok else f"PowerShell on {self.host.name}: {res.why()}"

    async def disk_free(self, paths: Sequence[str], timeout: float) -> dict[str, tuple[str, int, int] | str]:
        return {p: f"disk space on the Windows host {self.host.name} is not read" for p in paths}
