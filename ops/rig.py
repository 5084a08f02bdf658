"""A live rig: its config, its connected hosts and the prober that shares caches between polls."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from ops.engines.overlay import effective_rig, records_key
from ops.model import RigConfig
from ops.platform.base import Host
from ops.platform.factory import make_hosts
from ops.probes.prober import Prober


@dataclass
class LiveRig:
    config: RigConfig
    hosts: dict[str, Host]
    prober: Prober

    _jobs: Any = None

    async def job_of(self, side: str, within_s: float = 0.0) -> dict | None:
        """A scheduled side's job as the engine saw it on this beat (one squeue shared by all sides), with
        the ports its job took followed (None for a process rig, or a side without a job). within_s: a
        display's beat takes the last squeue up to that old while the next one runs (SharedObservation)."""
        if self.config.engine == "process":
            return None
        if self._jobs is None:
            from ops.engines import engine_for
            from ops.engines.beat import SharedObservation
            self._jobs = SharedObservation(engine_for(self.config, self.hosts), self.config.poll_s / 2)
        self.follow_jobs(self.config.poll_s / 2)
        run = (await self._jobs.runs(self, within_s)).get(side)
        if run is None:
            return None
        j = run.to_json()
        job = j.get("job") or {}
        return {"id": job.get("display_id"), "state": j["word"], "verdict": j["state"], "node": j["where"],
                "submit_time": job.get("submit_time"), "evidence": j["evidence"]}

    _followed: float = -1e9
    _records: tuple | None = None   # records_key when the prober's rig was last made

    def follow_jobs(self, max_age_s: float = 0.0) -> None:
        """Scheduled sides: probe the ports/adapter their jobs took on their nodes (ops/engines/overlay.py):
        one small file per side. max_age_s: skip when followed that recently (the sides of one beat share
        it; a plan passes 0 and reads afresh)."""
        if self.config.engine == "process":
            return
        now = time.monotonic()
        if now - self._followed < max_age_s:
            return
        self._followed = now
        key = records_key(self.config)
        if key != self._records:
            self._records = key
            self.prober.rig = effective_rig(self.config)

    async def close(self) -> None:
        for h in self.hosts.values():
            await h.close()


@asynccontextmanager
async def open_rig(rig: RigConfig, rpc_every_s: float = 30.0) -> AsyncIterator[LiveRig]:
    hosts = await make_hosts(rig.hosts)
    live = LiveRig(rig, hosts, Prober(effective_rig(rig), hosts, rpc_every_s=rpc_every_s))
    try:
        yield live
    finally:
        await live.close()
