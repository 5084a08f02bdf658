"""VRAM readings: NVML in-process on a local host, `nvidia-smi` through any host.

An unreadable field (`[N/A]`, a missing driver, a timeout) is None — unknown — never 0: adapter polling
decides on a VRAM rise, and a fake 0 baseline would accept a launch that rendered nothing.

Per-process memory (the server's own VRAM, `server_mb`) is the UNION of the driver's lists by pid, never a
sum. A Vulkan renderer such as a CARLA server is a C+G process: NVML lists it in both its compute and its
graphics list with the same bytes (measured on an H200: a wgpu/Vulkan process holding 6 GiB, 6358 MiB in
each list; issue 22), so a sum doubles it. A graphics-only (G) process is in no `--query-compute-apps`
output, so the nvidia-smi path reads `nvidia-smi -q -x`, which lists every process with its type. Both
paths produce the same GpuProc rows (type C, G or C+G), and the tests compare them on recorded outputs.

The nvidia-smi path is ONE call, `-q -x`: it carries each GPU's name, uuid and framebuffer used/total
besides the processes, so the VRAM pane and the resource guards' GPU view (gpuview.py) are one reading
(measured on an H200, driver 580: `-q -x` 0.12 s wall, `--query-gpu` 0.02 s; the console used to run
both, plus `--query-gpu` and `--query-compute-apps` again for the guards).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ops.model import HostConfig
from ops.parse.errors import ParseError
from ops.parse.nvsmi import QUERY_XML_ARGS, SmiLog, parse_query_xml
from ops.platform.base import Host
from ops.tristate import Evidence

MIB = 2**20
# NVML's "no MIG instance" (NVML_VALUE_NOT_AVAILABLE as a 32-bit id); nvidia-smi prints it as N/A.
_NO_INSTANCE = 0xFFFFFFFF
_TYPE_ORDER = ("M", "C", "G")   # nvidia-smi's order in a combined type: "M+C", "C+G"

Instance = tuple[int | None, int | None]   # MIG (GPU instance, compute instance); (None, None) without MIG


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    used_mb: int | None
    total_mb: int | None
    uuid: str | None = None   # None: the driver did not say (never guessed: the guards match GPUs by it)


@dataclass(frozen=True)
class GpuProc:
    """One process's memory on one GPU, the same row from NVML and from nvidia-smi."""
    gpu: int
    pid: int
    type: str               # "C", "G", "C+G" (nvidia-smi's words; from NVML: which of its lists held it)
    used_mb: int | None     # None: the driver cannot say (e.g. WDDM): unknown, never 0
    instance: Instance = (None, None)


@dataclass(frozen=True)
class VramReading:
    gpus: tuple[Gpu, ...]
    apps: dict[int, int | None] | None   # pid → used MiB over all GPUs; None when per-process use is unreadable
    evidence: Evidence
    source: str
    procs: tuple[GpuProc, ...] | None = None   # the rows `apps` sums up per pid (GPU, type); None as apps
    apps_error: str | None = None              # why per-process use is unreadable (the raw error)

    @property
    def ok(self) -> bool:
        return self.evidence.ok

    def gpu(self, index: int | None) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None) if index is not None else None


def _source(cfg: HostConfig, host: Host) -> str:
    if cfg.vram_source != "auto":
        return cfg.vram_source
    return "nvml" if host.is_local else "nvidia-smi"


def merge_procs(rows: Iterable[GpuProc]) -> tuple[GpuProc, ...]:
    """One row per (GPU, pid, MIG instance): rows of the same process are united, never added. The memory
    is the one allocation every listing reports (the larger if two ever differ; a number over unknown) and
    the type the union of the letters (C and G make C+G)."""
    merged: dict[tuple[int, int, Instance], GpuProc] = {}
    for r in rows:
        key = (r.gpu, r.pid, r.instance)
        prev = merged.get(key)
        if prev is None:
            merged[key] = r
            continue
        letters = set(prev.type.split("+")) | set(r.type.split("+"))
        kind = "+".join([k for k in _TYPE_ORDER if k in letters] + sorted(letters - set(_TYPE_ORDER)))
        merged[key] = GpuProc(r.gpu, r.pid, kind, _one_allocation(prev.used_mb, r.used_mb), r.instance)
    return tuple(sorted(merged.values(), key=lambda p: (p.gpu, p.pid, str(p.instance))))


def _one_allocation(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def per_pid(procs: Iterable[GpuProc]) -> dict[int, int | None]:
    """pid → MiB over every GPU: memory on two GPUs is two allocations, so those add up; unknown on any
    GPU makes the process's total unknown."""
    out: dict[int, int | None] = {}
    for p in procs:
        prev = out.get(p.pid, 0)
        out[p.pid] = None if prev is None or p.used_mb is None else prev + p.used_mb
    return out


def nvml_rows(gpu: int, compute: Iterable, graphics: Iterable) -> tuple[GpuProc, ...]:
    """NVML's two process lists of one GPU (objects with pid, usedGpuMemory in bytes or None, and MIG
    gpuInstanceId/computeInstanceId), united by pid: a C+G process once, with its memory once."""
    rows = [GpuProc(gpu, int(p.pid), letter, None if p.usedGpuMemory is None else int(p.usedGpuMemory // MIB),
                    (_nvml_id(getattr(p, "gpuInstanceId", None)), _nvml_id(getattr(p, "computeInstanceId", None))))
            for letter, listing in (("C", compute), ("G", graphics)) for p in listing]
    return merge_procs(rows)


def _nvml_id(v: object) -> int | None:
    return None if v is None or v == _NO_INSTANCE else int(v)  # type: ignore[call-overload]


def smi_rows(log: SmiLog) -> tuple[GpuProc, ...] | None:
    """`nvidia-smi -q -x`'s processes as GpuProc rows; None when any GPU's list is unreadable."""
    rows: list[GpuProc] = []
    for g in log.gpus:
        if g.processes is None:
            return None
        rows.extend(GpuProc(g.index, p.pid, p.type, p.used_mb, p.instance) for p in g.processes)
    return merge_procs(rows)


def _nvml_read() -> tuple[tuple[Gpu, ...], tuple[GpuProc, ...] | None, str | None]:
    import pynvml  # nvidia-ml-py provides it; imported lazily so a missing driver costs nothing at start
    pynvml.nvmlInit()
    try:
        gpus = []
        procs: list[GpuProc] | None = []
        error = None
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            used_mb, total_mb = _nvml_memory(pynvml, h)
            gpus.append(Gpu(i, name, used_mb, total_mb, _nvml_uuid(pynvml, h)))
            if procs is None:
                continue
            try:
                procs.extend(nvml_rows(i, pynvml.nvmlDeviceGetComputeRunningProcesses(h),
                                       pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)))
            except pynvml.NVMLError as e:   # the GPU's totals stay good; only per-process use is unknown
                procs, error = None, f"gpu{i} process lists: {type(e).__name__}: {e}"
        return tuple(gpus), (None if procs is None else tuple(procs)), error
    finally:
        pynvml.nvmlShutdown()


def _nvml_uuid(pynvml, handle) -> str | None:
    try:
        uuid = pynvml.nvmlDeviceGetUUID(handle)
    except pynvml.NVMLError:
        return None
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


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
            gpus, procs, apps_error = await asyncio.wait_for(asyncio.to_thread(_nvml_read), timeout)
        except asyncio.TimeoutError:
            return VramReading((), None, Evidence(what, False, error=f"timeout after {timeout} s",
                                                  took_ms=(time.perf_counter() - t0) * 1e3), source)
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError: all mean "cannot measure"
            return VramReading((), None, Evidence(what, False, error=f"{type(e).__name__}: {e}",
                                                  took_ms=(time.perf_counter() - t0) * 1e3), source)
        return _reading(what, source, gpus, procs, apps_error, (time.perf_counter() - t0) * 1e3)
    what = f"nvidia-smi on {host.name}"
    res = await host.run([*cfg.nvidia_smi, *QUERY_XML_ARGS], timeout=timeout)
    if not res.ok:
        return VramReading((), None, Evidence(what, False, error=res.why(), took_ms=res.took_s * 1e3), source)
    log = parse_query_xml(res.stdout)
    if isinstance(log, ParseError):
        return VramReading((), None, Evidence(what, False, error=str(log), took_ms=res.took_s * 1e3), source)
    gpus = tuple(Gpu(g.index, g.name or "?", g.used_mb, g.total_mb, g.uuid) for g in log.gpus)
    procs = smi_rows(log)
    apps_error = None if procs is not None else "nvidia-smi -q -x: a GPU's process list is N/A"
    return _reading(what, source, gpus, procs, apps_error, (time.perf_counter() - t0) * 1e3)


def _reading(what: str, source: str, gpus: tuple[Gpu, ...], procs: tuple[GpuProc, ...] | None,
             apps_error: str | None, took_ms: float) -> VramReading:
    detail = _detail(gpus) + ("" if apps_error is None else f"; per-process use unknown: {apps_error}")
    apps = None if procs is None else per_pid(procs)
    return VramReading(gpus, apps, Evidence(what, True, detail=detail, took_ms=took_ms), source, procs, apps_error)


def _detail(gpus: tuple[Gpu, ...]) -> str:
    return "; ".join(f"gpu{g.index} {g.name}: {_mb(g.used_mb)}/{_mb(g.total_mb)} MiB" for g in gpus) or "no GPU"


def _mb(v: int | None) -> str:
    return "?" if v is None else str(v)
