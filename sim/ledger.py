"""The fake GPUs: what each -graphicsadapter index does, and the VRAM ledger the fake nvidia-smi reads.

Why a ledger of files keyed by pid: VRAM is held by a *process* and freed by the driver when it dies,
however it dies (SIGKILL included). So a rendering fake server writes `D/sim/gpu/<pid>.json` and the
fake nvidia-smi counts an entry only while (pid, create_time) is alive; stale entries are removed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.platform.procs import read_proc
from sim.layout import CREATE_TIME_TOLERANCE_S, SimLayout, read_json, write_json_atomic

RENDER = "render"   # uses VRAM on its GPU a moment after start, listens
IDLE = "idle"       # listens, uses no VRAM (e.g. the Microsoft Basic Render Driver)
CRASH = "crash"     # dies ~1 s after start, before listening (the 0x18 crash of a bad adapter)
BEHAVIOURS = (RENDER, IDLE, CRASH)
# How nvidia-smi types a process: C compute, G graphics, C+G both. A UE4 server renders through Vulkan,
# and a Vulkan process is C+G (a wgpu/Vulkan process on an H200, measured: issue 22); an OpenGL one is G.
PROC_TYPES = ("C", "G", "C+G")
VULKAN = "C+G"


@dataclass(frozen=True)
class GpuSpec:
    index: int
    name: str
    total_mb: int
    base_used_mb: int = 0
    uuid: str = ""


@dataclass(frozen=True)
class AdapterSpec:
    behaviour: str
    gpu: int | None = None          # render: the GPU whose VRAM rises
    mb: int = 6000                  # render: how much
    delay_s: float = 0.5            # render: "a short moment after start"; crash: time to the crash
    proc_type: str = VULKAN         # render: the process type nvidia-smi shows (C, G, C+G)


@dataclass(frozen=True)
class GpuModel:
    gpus: tuple[GpuSpec, ...]
    adapters: dict[int, AdapterSpec]

    def adapter(self, index: int) -> AdapterSpec:
        # An index the machine does not have: UE4 dies on it like on a bad adapter.
        return self.adapters.get(index, AdapterSpec(CRASH, delay_s=1.0))


def default_gpus() -> dict[str, Any]:
    """The default D/sim/gpus.json: one H200 (the fixtures' card); adapter 0 renders on it."""
    return {
        "gpus": [{"index": 0, "name": "NVIDIA H200", "total_mb": 143771, "base_used_mb": 0,
                  "uuid": "GPU-5a1f0c3e-8d2b-4c7a-9e61-0b3d2f4a7c19"}],
        "adapters": {
            "0": {"behaviour": RENDER, "gpu": 0, "mb": 6000, "delay_s": 0.5, "type": VULKAN},
            "1": {"behaviour": IDLE},
            "2": {"behaviour": CRASH, "delay_s": 1.0},
            "3": {"behaviour": IDLE},
        },
    }


def load_model(layout: SimLayout) -> GpuModel:
    raw = read_json(layout.gpus_json, None) or default_gpus()
    gpus = tuple(GpuSpec(index=int(g["index"]), name=str(g["name"]), total_mb=int(g["total_mb"]),
                         base_used_mb=int(g.get("base_used_mb", 0)),
                         uuid=str(g.get("uuid") or f"GPU-00000000-0000-0000-0000-{int(g['index']):012d}"))
                 for g in raw["gpus"])
    adapters: dict[int, AdapterSpec] = {}
    for key, a in raw.get("adapters", {}).items():
        behaviour = str(a["behaviour"])
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"{layout.gpus_json}: adapter {key}: unknown behaviour {behaviour!r}")
        proc_type = str(a.get("type", VULKAN))
        if proc_type not in PROC_TYPES:
            raise ValueError(f"{layout.gpus_json}: adapter {key}: unknown process type {proc_type!r} "
                             f"(one of {', '.join(PROC_TYPES)})")
        adapters[int(key)] = AdapterSpec(behaviour=behaviour, gpu=a.get("gpu"), mb=int(a.get("mb", 6000)),
                                         proc_type=proc_type,
                                         delay_s=float(a.get("delay_s", 1.0 if behaviour == CRASH else 0.5)))
    return GpuModel(gpus=gpus, adapters=adapters)


@dataclass(frozen=True)
class LedgerEntry:
    pid: int
    create_time: float | None
    gpu: int
    mb: int
    path: Path
    type: str = VULKAN


def write_entry(layout: SimLayout, pid: int, create_time: float, gpu: int, mb: int, **extra: Any) -> Path:
    path = layout.gpu_ledger / f"{pid}.json"
    write_json_atomic(path, {"gpu": gpu, "mb": mb, "pid": pid, "create_time": create_time, **extra})
    return path


# Read through /proc, not psutil: the fake nvidia-smi runs this on every call, and psutil's import was a
# fifth of its cost (a real nvidia-smi -q -x costs 0.06 s of CPU).
def _alive(pid: int, create_time: float | None) -> bool:
    """Is (pid, create_time) a live, non-zombie process? create_time None: trust the pid alone."""
    p = read_proc(pid)
    if p is None or p.state == "Z":
        return False
    return create_time is None or abs(p.create_time - create_time) <= CREATE_TIME_TOLERANCE_S


def live_entries(layout: SimLayout, *, clean: bool = True) -> list[LedgerEntry]:
    """Entries whose process is alive; with clean, entries of dead processes are deleted."""
    out: list[LedgerEntry] = []
    try:
        files = sorted(layout.gpu_ledger.glob("*.json"))
    except FileNotFoundError:
        return out
    for path in files:
        try:
            d = read_json(path, None)
        except ValueError:
            continue  # cannot be half-written (atomic rename); a foreign file: ignore it
        if not d:
            continue
        pid = int(d.get("pid") or path.stem)
        ct = d.get("create_time")
        if _alive(pid, float(ct) if ct is not None else None):
            out.append(LedgerEntry(pid=pid, create_time=ct, gpu=int(d["gpu"]), mb=int(d["mb"]), path=path,
                                   type=str(d.get("type", VULKAN))))
        elif clean:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return sorted(out, key=lambda e: (e.gpu, e.pid))
