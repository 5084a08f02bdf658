"""Which GPU each process is on, and each GPU's identity: `nvidia-smi` with uuids.

The VRAM probe (vram.py) answers "how full"; the resource guards also need "whose": the server's GPU is
the one whose compute-apps list holds the server's pid (positive identification, unlike an adapter
index), the model's GPU is named by its uuid (torch), and a process on a side's GPU that belongs to no
side is someone else's load. `[N/A]` fields are unknown (None), never 0.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ops.model import HostConfig
from ops.platform.base import Host
from ops.tristate import Evidence

GPU_ARGS = ("--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv,noheader,nounits")
APP_ARGS = ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")


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


def _num(text: str) -> int | None:
    text = text.strip()
    try:
        return int(float(text))
    except ValueError:
        return None   # [N/A], [Not Supported], empty


def parse_gpus(text: str) -> tuple[GpuRow, ...] | str:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or _num(parts[0]) is None:
            return f"unexpected nvidia-smi gpu line {line[:200]!r}"
        rows.append(GpuRow(int(parts[0]), parts[1], parts[2], _num(parts[3]), _num(parts[4])))
    return tuple(rows)


def parse_apps(text: str) -> tuple[GpuApp, ...] | str:
    apps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or _num(parts[0]) is None:
            return f"unexpected nvidia-smi compute-apps line {line[:200]!r}"
        apps.append(GpuApp(int(parts[0]), parts[1], _num(parts[2])))
    return tuple(apps)


async def read_gpu_view(cfg: HostConfig, host: Host, timeout: float) -> GpuView:
    t0 = time.perf_counter()
    what = f"nvidia-smi --query-gpu/--query-compute-apps on {host.name}"
    res, res_apps = await asyncio.gather(host.run([*cfg.nvidia_smi, *GPU_ARGS], timeout=timeout),
                                         host.run([*cfg.nvidia_smi, *APP_ARGS], timeout=timeout))
    if not res.ok:
        return GpuView(host.name, (), None, Evidence(what, False, error=res.why(), took_ms=res.took_s * 1e3))
    gpus = parse_gpus(res.stdout)
    if isinstance(gpus, str):
        return GpuView(host.name, (), None, Evidence(what, False, error=gpus, took_ms=res.took_s * 1e3))
    apps: tuple[GpuApp, ...] | None = None
    error = None
    if res_apps.ok:
        parsed = parse_apps(res_apps.stdout)
        if isinstance(parsed, str):
            error = parsed
        else:
            apps = parsed
    else:
        error = res_apps.why()
    detail = "; ".join(f"gpu{g.index} {g.name} {g.uuid}: {_mb(g.used_mb)}/{_mb(g.total_mb)} MiB" for g in gpus)
    if apps is not None:
        detail += f"; {len(apps)} compute processes"
    else:
        detail += f"; processes unreadable: {error}"
    return GpuView(host.name, gpus, apps, Evidence(what, True, detail=detail,
                                                    took_ms=(time.perf_counter() - t0) * 1e3))


def _mb(v: int | None) -> str:
    return "?" if v is None else str(v)
