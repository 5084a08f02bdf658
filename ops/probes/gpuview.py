"""Which GPU each process is on, and each GPU's identity: the resource guards' view of a VRAM reading.

The VRAM probe (vram.py) answers "how full"; the resource guards also need "whose": the server's GPU is
the one whose process list holds the server's pid (positive identification, unlike an adapter index),
the model's GPU is named by its uuid (torch), and a process on a side's GPU that belongs to no side is
someone else's load. Both come from ONE reading of the host (NVML in-process, or `nvidia-smi -q -x`),
shared with the VRAM pane by the prober's cadence, so graphics-only processes count here too. Unknown
fields stay None, never 0.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.probes.vram import VramReading
from ops.tristate import Evidence


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str
    used_mb: int | None
    total_mb: int | None

    @property
    def free_mb(self) -> int | None:
        return None if self.used_mb is None or self.total_mb is None else self.total_mb - self.used_mb


@dataclass(frozen=True)
class GpuApp:
    pid: int
    gpu_uuid: str
    used_mb: int | None
    type: str = "C"       # C, G, C+G as the driver lists it


@dataclass(frozen=True)
class GpuView:
    host: str
    gpus: tuple[GpuRow, ...]
    apps: tuple[GpuApp, ...] | None     # None: the per-process list could not be read
    evidence: Evidence

    @property
    def ok(self) -> bool:
        return self.evidence.ok

    def by_uuid(self, uuid: str | None) -> GpuRow | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def gpu_of(self, pids: set[int]) -> GpuRow | None:
        """The GPU holding any of these pids (the first found: a server renders on one GPU)."""
        for a in self.apps or ():
            if a.pid in pids:
                return self.by_uuid(a.gpu_uuid)
        return None

    def apps_on(self, uuid: str) -> list[GpuApp]:
        return [a for a in self.apps or () if a.gpu_uuid == uuid]


def gpu_view(host: str, reading: VramReading) -> GpuView:
    """The guards' view of one VRAM reading. A GPU whose uuid the driver did not give gets a name no
    torch uuid can equal, so nothing is ever matched to it by guess."""
    uuid = {g.index: g.uuid or f"unknown-uuid-gpu{g.index}" for g in reading.gpus}
    gpus = tuple(GpuRow(g.index, uuid[g.index], g.name, g.used_mb, g.total_mb) for g in reading.gpus)
    if not reading.ok:
        return GpuView(host, (), None, reading.evidence)
    apps = (None if reading.procs is None else
            tuple(GpuApp(p.pid, uuid.get(p.gpu, f"unknown-uuid-gpu{p.gpu}"), p.used_mb, p.type)
                  for p in reading.procs))
    ev = reading.evidence
    detail = "; ".join(f"gpu{g.index} {g.name} {g.uuid}: {_mb(g.used_mb)}/{_mb(g.total_mb)} MiB" for g in gpus)
    detail += (f"; {len(apps)} GPU processes" if apps is not None
               else f"; processes unreadable: {reading.apps_error}")
    return GpuView(host, gpus, apps, Evidence(ev.what, True, detail=detail, took_ms=ev.took_ms))


def _mb(v: int | None) -> str:
    return "?" if v is None else str(v)
