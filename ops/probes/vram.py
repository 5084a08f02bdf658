"""VRAM readings: NVML in-process on a local host, `nvidia-smi` CSV through any host.

An unreadable field (`[N/A]`, a missing driver, a timeout) is None — unknown — never 0: adapter polling
decides on a VRAM rise, and a fake 0 baseline would accept a launch that rendered nothing.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ops.hosts.base import Host
from ops.model import HostConfig
from ops.parse.errors import ParseError
from ops.parse.nvsmi import QUERY_APPS_ARGS, QUERY_GPU_ARGS, parse_compute_apps, parse_query_gpu
from ops.tristate import Evidence


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    used_mb: int | None
    total_mb: int | None


@dataclass(frozen=True)
class VramReading:
    gpus: tuple[Gpu, ...]
    apps: dict[int, int | None] | None   # pid → used MiB; None when per-process use is unreadable
    evidence: Evidence
    source: str

    @property
    def ok(self) -> bool:
        return self.evidence.ok

    def gpu(self, index: int | None) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None) if index is not None else None


def _source(cfg: HostConfig, host: Host) -> str:
    if cfg.vram_source != "auto":
        return cfg.vram_source
    return "nvml" if host.is_local else "nvidia-smi"


def _nvml_read() -> tuple[tuple[Gpu, ...], dict[int, int | None]]:
    import pynvml  # nvidia-ml-py provides it; imported lazily so a missing driver costs nothing at start
    pynvml.nvmlInit()
    try:
        gpus = []
        apps: dict[int, int | None] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(Gpu(i, name, int(mem.used // 2**20), int(mem.total // 2**20)))
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = p.usedGpuMemory
                apps[int(p.pid)] = None if used is None else int(used // 2**20)
        return tuple(gpus), apps
    finally:
        pynvml.nvmlShutdown()


async def read_vram(cfg: HostConfig, host: Host, timeout: float = 5.0) -> VramReading:
    source = _source(cfg, host)
    t0 = time.perf_counter()
    if source == "nvml":
        what = "NVML"
        try:
            gpus, apps = await asyncio.wait_for(asyncio.to_thread(_nvml_read), timeout)
        except asyncio.TimeoutError:
            return VramReading((), None, Evidence(what, False, error=f"timeout after {timeout} s",
                                                  took_ms=(time.perf_counter() - t0) * 1e3), source)
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError: all mean "cannot measure"
            return VramReading((), None, Evidence(what, False, error=f"{type(e).__name__}: {e}",
                                                  took_ms=(time.perf_counter() - t0) * 1e3), source)
        return VramReading(gpus, apps, Evidence(what, True, detail=_detail(gpus),
                                                took_ms=(time.perf_counter() - t0) * 1e3), source)
    what = f"nvidia-smi on {host.name}"
    res = await host.run([*cfg.nvidia_smi, *QUERY_GPU_ARGS], timeout=timeout)
    if not res.ok:
        return VramReading((), None, Evidence(what, False, error=res.why(), took_ms=res.took_s * 1e3), source)
    parsed = parse_query_gpu(res.stdout)
    if isinstance(parsed, ParseError):
        return VramReading((), None, Evidence(what, False, error=f"{parsed.reason}: {parsed.text!r}",
                                              took_ms=res.took_s * 1e3), source)
    gpus = tuple(Gpu(g.index, g.name, g.used_mb, g.total_mb) for g in parsed)
    apps_res = await host.run([*cfg.nvidia_smi, *QUERY_APPS_ARGS], timeout=timeout)
    apps: dict[int, int | None] | None = None
    if apps_res.ok:
        parsed_apps = parse_compute_apps(apps_res.stdout)
        if not isinstance(parsed_apps, ParseError):
            apps = {a.pid: a.used_mb for a in parsed_apps}
    took = (time.perf_counter() - t0) * 1e3
    return VramReading(gpus, apps, Evidence(what, True, detail=_detail(gpus), took_ms=took), source)


def _detail(gpus: tuple[Gpu, ...]) -> str:
    return "; ".join(f"gpu{g.index} {g.name}: {_mb(g.used_mb)}/{_mb(g.total_mb)} MiB" for g in gpus) or "no GPU"


def _mb(v: int | None) -> str:
    return "?" if v is None else str(v)
