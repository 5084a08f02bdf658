"""The engine seam: where a side's processes run, and how a side is started, observed and stopped.

An engine is one module (ops/engines/<kind>.py) with one class implementing `Engine`; `engine_for` picks
it by the rig's `engine:` key. The console and the harness call only this interface:

    start(live, sides, conf)  -> list[Started]     "start a side": the detached harness, or a batch job
    observe(live)             -> dict[side, Run]   one observation of every side this engine runs, per
                                                   beat (a shared process table, one squeue)
    stop_plan(live, side)     -> Plan              the guard's plan that stops the side's run (exact targets)

Targets are what the guard re-verifies before acting: a process `Target(host, pid, create_time, ...)` or a
job `JobTarget(cluster, job_id, name, submit_time)` (ops/actions/guard.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ops.actions.guard import Confirmation, JobTarget, Plan, Target
from ops.tristate import Evidence, State


@dataclass(frozen=True)
class Run:
    """One side's run as its engine sees it."""

    side: str
    engine: str                       # 'process' | 'slurm'
    state: State                      # ALIVE: it runs (or will: queued); DEAD: it ended (positive evidence)
    word: str                         # the engine's own word: RUNNING, PENDING, FAILED ... / harness status
    where: str | None = None          # host or node
    targets: tuple[Target | JobTarget, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def job(self) -> JobTarget | None:
        """The run's job, for a scheduled side."""
        return next((t for t in self.targets if isinstance(t, JobTarget)), None)

    def to_json(self) -> dict:
        return {"engine": self.engine, "state": self.state.value, "word": self.word, "where": self.where,
                "targets": [t.to_json() for t in self.targets],
                "evidence": [e.line() for e in self.evidence], **self.detail}


@dataclass(frozen=True)
class Started:
    side: str
    ok: bool
    detail: str
    target: Target | JobTarget | None = None
    refused: str | None = None


class Engine(Protocol):
    kind: str

    async def start(self, live: Any, sides: Sequence[str], conf: Confirmation) -> list[Started]: ...

    async def observe(self, live: Any) -> dict[str, Run]: ...

    async def stop_plan(self, live: Any, side: str) -> Plan: ...
