"""The host interface every probe and operation talks to.

`run` never raises for a timeout or a lost transport: it returns a Result whose `error` says what
happened, so that the probe above can answer UNKNOWN with the raw error as evidence.
"""
from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ops.platform.procs import ProcTable
from ops.platform.types import FileStat, FileText, Listeners, SignalOutcome, TcpCheck
from ops.tristate import Evidence

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "scripts"


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    rc: int | None            # None when the command did not finish (timeout, transport error)
    stdout: str = ""
    stderr: str = ""
    took_s: float = 0.0
    error: str | None = None  # "timeout after 5.0 s", "transport: ...", "spawn: ..."
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0

    def why(self) -> str:
        """A one-line reason for a failed result, raw error text included."""
        if self.error:
            return self.error
        tail = (self.stderr or self.stdout).strip().splitlines()
        return f"exit {self.rc}" + (f": {tail[-1][:300]}" if tail else "")


class ScriptUnavailable(Exception):
    """A packaged script could not be put on the host (transport down, disk full): probes say UNKNOWN."""


class Platform(abc.ABC):
    """What the console asks of a host's operating system. One subclass a platform: LinuxLocal (this
    machine: /proc, sock_diag, direct reads), LinuxRemote (packaged scripts and coreutils over the host's
    transport), Windows (PowerShell/CIM). A new host type picks one of these, or adds one here."""

    def __init__(self, host: Host) -> None:
        self.host = host

    @abc.abstractmethod
    async def process_table(self, timeout: float, fresh_pids: frozenset[int] = frozenset(),
                            within_s: float = 0.0) -> ProcTable:
        """Every process with pid, ppid, create time and argv; an error table when it cannot be read.
        within_s > 0 (a display's beat, never a plan): a table read at most that long ago will do, such as
        one a remote host's agent pushed (ops/platform/remote_agent.py); 0: read it now."""

    @abc.abstractmethod
    async def signal_if_same(self, pid: int, create_time: float, sig: str, timeout: float,
                             cmdline: tuple[str, ...] | None = None) -> SignalOutcome:
        """Send SIGTERM/SIGKILL to pid only if it is still the planned process (checked on the host): the
        same create time and, where the platform can exec() (Linux), the same argv `cmdline`."""

    @abc.abstractmethod
    async def listeners(self, timeout: float, interest: Iterable[int] = ()) -> Listeners:
        """Listening TCP ports and, for the ports in `interest`, their owner pids."""

    @abc.abstractmethod
    async def clients_connected(self, port: int, timeout: float) -> tuple[int | None, Evidence]:
        """How many established connections `port` has; None when it cannot be told."""

    async def client_peers(self, port: int, timeout: float) -> tuple[frozenset[str] | None, Evidence]:
        """The remote ends of `port`'s established connections (to tell a lasting client from a passing
        one); a platform that only counts them names them by position."""
        n, ev = await self.clients_connected(port, timeout)
        return (None if n is None else frozenset(f"#{i}" for i in range(n))), ev

    @abc.abstractmethod
    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        """Does the host take TCP connections on port (refused: positive evidence; timeout: cannot tell)?"""

    @abc.abstractmethod
    async def memory(self, timeout: float) -> tuple[int, int] | str:
        """(available MiB, total MiB) of the host's memory, or the error in words."""

    @abc.abstractmethod
    async def disk_free(self, paths: Sequence[str], timeout: float) -> dict[str, tuple[str, int, int] | str]:
        """path → (mount point, free MiB for an unprivileged writer, total MiB), or the error in words."""

    @abc.abstractmethod
    async def stat_file(self, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
        """within_s as for process_table."""

    @abc.abstractmethod
    async def read_text(self, path: str, timeout: float, limit: int) -> FileText: ...

    @abc.abstractmethod
    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None: ...


class Host(abc.ABC):
    """A machine the console reaches: a transport (`run`, `spawn_detached`) and its `platform`.
    `os` is 'linux' or 'windows'."""

    name: str
    os: str
    is_local: bool = False   # this machine: probes may read /proc and files directly
    platform: Platform       # set by each concrete host

    @abc.abstractmethod
    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        """Run argv (never a shell string) and wait at most `timeout` seconds.

        On timeout the command is stopped on the host as well: no orphan is left behind.
        """

    @abc.abstractmethod
    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None,
                             timeout: float = 15.0) -> int:
        """Start argv in its own session, stdin from /dev/null, stdout+stderr appended to log_path
        (None: discarded), and return its pid: a process that outlives the console. Raises SpawnError
        (ops/platform/common.py) with the raw reason."""

    async def close(self) -> None:  # pragma: no cover - default no-op
        return None

    async def script_path(self, name: str) -> str:
        """Where the packaged helper script `name` (ops/scripts/NAME) lies on this host.

        Remote hosts override this to copy the file over once; scripts run from files, never stdin.
        """
        return str(SCRIPTS_DIR / name)

    @property
    def tcp_address(self) -> str:
        """The address the console's TCP checks use to reach this host's ports."""
        return "127.0.0.1"

    @property
    def label(self) -> str:
        return self.name
