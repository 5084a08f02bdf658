"""What the screens need from the domain, as a small protocol the app is built against.

The live implementation (console/tui/backend.py) binds it to ops; tests hand the app a fake with frozen
snapshots. Screens never import an ops operation module themselves: the backend decides what exists, and
says so with Unavailable while an operation has not landed yet (the key then explains instead of crashing).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ops.actions.guard import Confirmation, Plan
from ops.model import RigConfig
from ops.probes.prober import SideSnapshot


class Unavailable(Exception):
    """An operation whose ops module or function is not there (yet); str(e) says which."""


@dataclass(frozen=True)
class ActionResult:
    ok: bool
    detail: str


@dataclass(frozen=True)
class PortsReport:
    status: dict[str, dict[int, str]]    # side -> port -> 'ok' | 'IN USE' | 'RESERVED' | 'SHARED' | 'UNKNOWN'
    lines: tuple[str, ...]               # the human report (ranges, conflicts, suggestions)
    conflicts: int = 0


@dataclass(frozen=True)
class StepOutcome:
    """One recovery step's result. status 'confirm' means: show `plan` in the modal, then execute it."""

    status: str                          # ok | failed | refused | skipped | confirm
    detail: str = ""
    plan: Plan | None = None
    evidence: tuple[str, ...] = field(default=())


class RecoveryDriver(Protocol):
    side: str

    async def verdict(self) -> StepOutcome: ...          # status ok with the kill plan, or refused
    async def kill(self, plan: Plan, conf: Confirmation) -> StepOutcome: ...
    async def server(self) -> StepOutcome: ...           # ok (kept) or confirm (a restart plan)
    async def relaunch(self) -> StepOutcome: ...         # ok (started) or confirm (a relaunch plan)
    async def execute(self, plan: Plan, conf: Confirmation) -> StepOutcome: ...
    async def wait_fresh(self, report: Callable[[str], None]) -> StepOutcome: ...


class Backend(Protocol):
    rig: RigConfig
    # Log lines a poll reads for the pane (0: none, as a table of sides shows no pane's log: the app says).
    log_tail: int

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def probe(self, side: str, rpc: bool | None = None) -> SideSnapshot: ...
    # A cadence poll of side on this beat (monotonic // poll_s) would read nothing: the app sleeps past it.
    def quiet_beat(self, side: str, beat: int) -> bool: ...
    async def log_lines(self, side: str, n: int) -> list[str] | None: ...   # the log's last n lines; None: unreadable
    def audit(self) -> list[dict[str, Any]] | None: ...   # every audit record, or None when unchanged
    async def scan_ports(self) -> PortsReport: ...
    async def plan(self, action: str, side: str) -> Plan: ...
    async def execute(self, action: str, plan: Plan, conf: Confirmation,
                      report: Callable[[str], None] | None = None) -> ActionResult: ...
    def recovery(self, side: str) -> RecoveryDriver: ...
    # The resource guards' warnings beside these snapshots (issue 21); a backend without it shows none.
    async def resources(self, snaps: dict[str, SideSnapshot]) -> list[str]: ...
