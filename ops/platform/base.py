"""The host interface every probe and operation talks to.

`run` never raises for a timeout or a lost transport: it returns a Result whose `error` says what
happened, so that the probe above can answer UNKNOWN with the raw error as evidence.
"""
from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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


class Host(abc.ABC):
    """A machine the console reaches. `os` is 'linux' or 'windows'."""

    name: str
    os: str
    is_local: bool = False   # this machine: probes may read /proc and files directly

    @abc.abstractmethod
    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        """Run argv (never a shell string) and wait at most `timeout` seconds.

        On timeout the command is stopped on the host as well: no orphan is left behind.
        """

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
