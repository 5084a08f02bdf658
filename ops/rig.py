"""A live rig: its config, its connected hosts and the prober that shares caches between polls."""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ops.engines.overlay import effective_rig
from ops.model import RigConfig
from ops.platform.base import Host
from ops.platform.factory import make_hosts
from ops.probes.prober import Prober


@dataclass
class LiveRig:
    config: RigConfig
    hosts: dict[str, Host]
    prober: Prober

    def follow_jobs(self) -> None:
        """Scheduled sides: probe the ports/adapter their jobs took on their nodes (ops/engines/overlay.py).
        Cheap (one small file per side); call it before a poll."""
        if self.config.engine != "process":
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
