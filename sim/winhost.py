"""A fake Windows host: answers the Windows command set from recorded PowerShell outputs and keeps every
script and argv it was sent, so tests can check what would run on a real Windows host (-Id, never -Name;
@(...) around the listing; an identity re-check before Stop-Process).

No Windows machine was available: the recordings are the CONSTRUCTED samples in tests/data (5.1's
`"\\/Date(ms)\\/"` and 7's ISO dates, a bare object for one process). The first listing is answered with the
recorded bytes verbatim; after a stop or a spawn changed the table, the rows are re-serialized in the same
flavour. Nothing here executes PowerShell.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from ops.parse.winproc import parse_creation_date
from ops.platform import powershell as ps
from ops.platform.base import Host, Result
from ops.platform.common import SpawnError, check_argv
from ops.platform.windows import Windows
from sim.fake_nvsmi import XmlProc, render_xml
from sim.ledger import GpuSpec

DEFAULT_NETSH = ("Protocol tcp Port Exclusion Ranges\r\n\r\nStart Port    End Port      \r\n"
                 "----------    --------      \r\n        80          80      \r\n"
                 "      5986        5986      \r\n\r\n* - Administered port exclusions.\r\n\r\n")
# Win32_OperatingSystem's counters are KiB: 5.5 GiB free of 32 GiB (a host below the 6 GiB floor).
DEFAULT_MEMORY = '{"FreePhysicalMemory":5767168,"TotalVisibleMemorySize":33554432}'
# nvidia-smi lists NVIDIA GPUs only; the second one's memory is unreadable ([N/A], as under some WDDM setups).
DEFAULT_GPUS = "0, NVIDIA GeForce RTX 4090, 1024, 24564\r\n1, NVIDIA RTX A2000, [N/A], [N/A]\r\n"
DEFAULT_XML_GPUS = (GpuSpec(0, "NVIDIA GeForce RTX 4090", 24564, 1024, "GPU-4090"),
                    GpuSpec(1, "NVIDIA RTX A2000", 6138, 0, "GPU-a2000"))


def nvsmi_xml(procs: Sequence[XmlProc] = (), gpus: tuple[GpuSpec, ...] = DEFAULT_XML_GPUS) -> str:
    """`nvidia-smi.exe -q -x` as the fake answers it: the sim's renderer, CRLF like every Windows output."""
    return render_xml(gpus, list(procs), na=False).replace("\n", "\r\n")


class FakeWindowsHost(Host):
    is_local = False

    def __init__(self, name: str = "win", *, processes_json: str, flavor: str = "ps51",
                 netsh_text: str = DEFAULT_NETSH, nvsmi_gpus: str = DEFAULT_GPUS, nvsmi_apps: str = "", nvsmi_xml_text: str | None = None,
                 listen_json: str = "[]", established: Mapping[int, str] | None = None,
                 memory_json: str = DEFAULT_MEMORY) -> None:
        if flavor not in ("ps51", "ps7"):
            raise ValueError("flavor is ps51 or ps7")
        self.name = name
        self.os = "windows"
        self.platform = Windows(self, self.run_powershell)
        self.flavor = flavor
        self._recorded: str | None = processes_json    # verbatim until the table changes
        loaded = json.loads(processes_json)
        self._rows: list[dict] = loaded if isinstance(loaded, list) else [loaded]
        self.netsh_text = netsh_text
        self.nvsmi_gpus = nvsmi_gpus
        self.nvsmi_apps = nvsmi_apps
        self.nvsmi_xml = nvsmi_xml() if nvsmi_xml_text is None else nvsmi_xml_text
        self.listen_json = listen_json
        self.memory_json = memory_json
        self.established = dict(established or {})
        self.scripts: list[str] = []                     # run_powershell scripts, in order
        self.runs: list[tuple[str, ...]] = []            # run() argvs, in order
        self.spawn_scripts: list[str] = []               # what spawn_detached would send
        self.stopped: list[int] = []
        self.timeout_next = 0                            # answer the next N calls with a timeout

    def __repr__(self) -> str:
        return f"FakeWindowsHost({self.name!r}, {self.flavor})"

    # ------------------------------------------------------------------ the Host interface

    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        args = check_argv(argv)
        self.runs.append(args)
        if self._timed_out():
            return Result(args, None, error=f"timeout after {float(timeout)} s", timed_out=True)
        exe = args[0].replace("\\", "/").rsplit("/", 1)[-1].lower()
        if exe in ("netsh", "netsh.exe"):
            return Result(args, 0, stdout=self.netsh_text)
        if exe in ("nvidia-smi", "nvidia-smi.exe"):
            if any(a.startswith("--query-gpu=") for a in args):
                return Result(args, 0, stdout=self.nvsmi_gpus)
            if any(a.startswith("--query-compute-apps=") for a in args):
                return Result(args, 0, stdout=self.nvsmi_apps)
            if set(args[1:]) == {"-q", "-x"}:
                return Result(args, 0, stdout=self.nvsmi_xml)
        return Result(args, 1, stderr=f"'{args[0]}' is not recognized as an internal or external command")

    async def run_powershell(self, script: str, timeout: float) -> Result:
        self.scripts.append(script)
        argv = ("powershell", "<script>")
        if self._timed_out():
            return Result(argv, None, error=f"timeout after {float(timeout)} s", timed_out=True)
        if "Stop-Process" in script:
            return Result(argv, 0, stdout=self._stop(script) + "\r\n")
        if "Get-CimInstance Win32_OperatingSystem" in script:
            return Result(argv, 0, stdout=self.memory_json)
        if "Get-CimInstance Win32_Process" in script:
            return Result(argv, 0, stdout=self._listing())
        if "Get-NetTCPConnection" in script and "-State Listen" in script:
            return Result(argv, 0, stdout=self.listen_json)
        m = re.search(r"-LocalPort ([0-9]+) -State Established", script)
        if "Get-NetTCPConnection" in script and m:
            return Result(argv, 0, stdout=self.established.get(int(m.group(1)), "[]"))
        return Result(argv, 1, stderr="fake windows host: no recording answers this script")

    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None, timeout: float = 15.0) -> int:
        args = check_argv(argv)
        if env or log_path:
            raise SpawnError("spawn: a detached Windows process takes no env and no log redirection")
        try:
            self.spawn_scripts.append(ps.ps_spawn_detached(args, cwd=cwd))
        except ValueError as e:
            raise SpawnError(f"spawn: {e}") from e
        pid = max(int(r["ProcessId"]) for r in self._rows) + 4
        self._add(pid, 0, ps.windows_cmdline(args))
        exe = args[0].replace("\\", "/").rsplit("/", 1)[-1]
        if exe.lower() == "carlaue4.exe":
            # The real launcher starts the shipping server as its child with the same arguments.
            root = args[0][: -len(exe)]
            ship = f"{root}CarlaUE4\\Binaries\\Win64\\CarlaUE4-Win64-Shipping.exe"
            self._add(pid + 4, pid, ps.windows_cmdline([ship, "CarlaUE4", *args[1:]]))
        return pid

    # ------------------------------------------------------------------ the recorded state

    def pids(self) -> set[int]:
        return {int(r["ProcessId"]) for r in self._rows}

    def _timed_out(self) -> bool:
        if self.timeout_next > 0:
            self.timeout_next -= 1
            return True
        return False

    def _listing(self) -> str:
        if self._recorded is not None:
            return self._recorded
        return json.dumps(self._rows, indent=4 if self.flavor == "ps51" else 2).replace("\n", "\r\n")

    def _stop(self, script: str) -> str:
        pid_m = re.search(r"^\$id = ([0-9]+)$", script, re.M)
        exp_m = re.search(r"^\$expected = (-?[0-9]+)$", script, re.M)
        if not pid_m or not exp_m or "Stop-Process -Id $id" not in script:
            raise AssertionError(f"stop script not in the expected form:\n{script}")
        pid, expected = int(pid_m.group(1)), int(exp_m.group(1))
        row = next((r for r in self._rows if int(r["ProcessId"]) == pid), None)
        if row is None:
            return '{"outcome":"gone"}'
        created = parse_creation_date(row.get("CreationDate"))
        if not isinstance(created, float):
            return '{"outcome":"changed","detail":"no CreationDate"}'
        ms = int(round(created * 1000))
        if abs(ms - expected) > 50:
            return json.dumps({"outcome": "changed", "create_ms": ms}, separators=(",", ":"))
        self._rows = [r for r in self._rows if r is not row]
        self._recorded = None
        self.stopped.append(pid)
        return '{"outcome":"sent"}'

    def _add(self, pid: int, ppid: int, cmdline: str) -> None:
        now = time.time()
        if self.flavor == "ps51":
            date = f"/Date({int(now * 1000)})/"
        else:
            date = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="microseconds")
        self._rows.append({"ProcessId": pid, "ParentProcessId": ppid, "CommandLine": cmdline, "CreationDate": date})
        self._recorded = None
