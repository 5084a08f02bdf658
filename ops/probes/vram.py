"""VRAM readings: NVML in-process on a local host, `nvidia-smi` CSV through any host.

An unreadable field (`[N/A]`, a missing driver, a timeout) is None — unknown — never 0: adapter polling
decides on a VRAM rise, and a fake 0 baseline would accept a launch that rendered nothing.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ops.model import HostConfig
from ops.parse.errors import ParseError
from ops.parse.nvsmi import QUERY_APPS_ARGS, QUERY_GPU_ARGS, parse_compute_apps, parse_query_gpu
from ops.platform.base import Host
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
            used_mb, total_mb = _nvml_memory(pynvml, h)
            gpus.append(Gpu(i, name, used_mb, total_mb))
            # CARLA renders through Vulkan: it is a graphics process, not a compute one. Both lists count.
            for lister in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                for p in lister(h):
                    used = p.usedGpuMemory
                    mb = None if used is None else int(used // 2**20)
                    prev = apps.get(int(p.pid), 0)
                    apps[int(p.pid)] = None if mb is None or prev is None else prev + mb
        return tuple(gpus), apps
    finally:
        pynvml.nvmlShutdown()


def _nvml_memory(pynvml, handle) -> tuple[int, int]:
    """(used, total) MiB as nvidia-smi counts them: NVML's v2 struct, whose `used` leaves out the memory
    the driver reserves for itself. v1's `used` includes it (615 MiB on an idle H200, measured), so NVML
    and the nvidia-smi path would disagree by that much on one GPU. v1 only where v2 is missing."""
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
            return int(mem.used // 2**20), int(mem.total // 2**20)
        except pynvml.NVMLError as e:
            if e.value not in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED):
                raise
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(mem.used // 2**20), int(mem.total // 2**20)


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
    smi_apps: dict[int, int | None] | None = None
    if apps_res.ok:
        parsed_apps = parse_compute_apps(apps_res.stdout)
        if not isinstance(parsed_apps, ParseError):
            smi_apps = {a.pid: a.used_mb for a in parsed_apps}
    took = (time.perf_counter() - t0) * 1e3
    return VramReading(gpus, smi_apps, Evidence(what, True, detail=_detail(gpus), took_ms=took), source)


def _detail(gpus: tuple[Gpu, ...]) -> str:
    return "; ".join(f"gpu{g.index} {g.name}: {_mb(g.used_mb)}/{_mb(g.total_mb)} MiB" for g in gpus) or "no GPU"


def _mb(v: int | None) -> str:
    return "?" if v is None else str(v)
