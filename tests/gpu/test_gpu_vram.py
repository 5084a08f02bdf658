"""Issue 8 (1): NVML in-process and the nvidia-smi CSV path agree, before and after a child takes 6 GiB.

One measurement (module fixture), several checks: both sources read through ops/probes/vram.read_vram on a
LocalHost, once with vram_source nvml and once with nvidia-smi, back to back; raw NVML v1/v2 structs and
nvidia-smi's reserved/free fields are recorded beside them so a disagreement says where it comes from.
"""
from __future__ import annotations

import asyncio

import pytest

from ops.model import HostConfig
from ops.platform.local import LocalHost
from ops.probes.vram import VramReading, read_vram
from tests.gpu.gpuutil import (
    AGREE_MB,
    ALLOC_GIB,
    GPU_MARKS,
    HOST,
    free_port,
    nvml_raw,
    record,
    smi_raw,
    start_standin,
    wait_gpu_released,
)

pytestmark = GPU_MARKS

NVML = HostConfig(HOST, "local", vram_source="nvml")
SMI = HostConfig(HOST, "local", vram_source="nvidia-smi")
PHASES = ("before", "after", "released")


def _read_both() -> tuple[VramReading, VramReading]:
    host = LocalHost(HOST)

    async def go():
        nv = await read_vram(NVML, host, timeout=15.0)
        smi = await read_vram(SMI, host, timeout=15.0)
        return nv, smi
    return asyncio.run(go())


def _fig(nv: VramReading, smi: VramReading) -> dict:
    return {"nvml": {"ok": nv.ok, "evidence": nv.evidence.line(), "took_ms": round(nv.evidence.took_ms, 1),
                     "gpus": [vars(g) for g in nv.gpus], "apps": nv.apps},
            "nvidia_smi": {"ok": smi.ok, "evidence": smi.evidence.line(), "took_ms": round(smi.evidence.took_ms, 1),
                           "gpus": [vars(g) for g in smi.gpus], "apps": smi.apps},
            "diff": {g.index: {"total": _d(g.total_mb, smi.gpu(g.index).total_mb if smi.gpu(g.index) else None),
                               "used": _d(g.used_mb, smi.gpu(g.index).used_mb if smi.gpu(g.index) else None)}
                     for g in nv.gpus}}


def _d(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """{phase: (nvml reading, nvidia-smi reading)} plus the child's pid and ready info."""
    d = tmp_path_factory.mktemp("gpuvram")
    out: dict = {}
    raw: dict = {}
    out["before"] = _read_both()
    raw["before"] = {"nvml": nvml_raw(), "nvidia_smi": smi_raw()}
    child = start_standin(d, free_port(), adapter=0, plan=f"0={ALLOC_GIB}")
    try:
        out["ready"] = child.wait_ready()
        out["after"] = _read_both()
        raw["after"] = {"nvml": nvml_raw(), "nvidia_smi": smi_raw()}
    finally:
        out["stopped"] = child.stop()
    out["pid"] = child.pid
    out["released_in_time"] = wait_gpu_released({child.pid})
    out["released"] = _read_both()
    raw["released"] = {"nvml": nvml_raw(), "nvidia_smi": smi_raw()}
    for phase in PHASES:
        record("vram", phase, _fig(*out[phase]))
    record("vram", "raw", raw)
    record("vram", "child", {"pid": child.pid, "ready": out["ready"], "stopped": out["stopped"],
                             "released_in_time": out["released_in_time"]})
    b_nv, b_smi = out["before"]
    a_nv, a_smi = out["after"]
    record("vram", "delta", {
        "nvml": {g.index: _d(g.used_mb, b_nv.gpu(g.index).used_mb) for g in a_nv.gpus if b_nv.gpu(g.index)},
        "nvidia_smi": {g.index: _d(g.used_mb, b_smi.gpu(g.index).used_mb) for g in a_smi.gpus if b_smi.gpu(g.index)},
        "child_nvml_mb": (a_nv.apps or {}).get(child.pid), "child_smi_mb": (a_smi.apps or {}).get(child.pid)})
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("phase", PHASES)
def test_both_sources_read(measured, phase) -> None:
    nv, smi = measured[phase]
    assert nv.ok, nv.evidence.line()
    assert smi.ok, smi.evidence.line()
    assert nv.gpus and [g.index for g in nv.gpus] == [g.index for g in smi.gpus]
    assert all(g.used_mb is not None and g.total_mb is not None for g in (*nv.gpus, *smi.gpus))


@pytest.mark.parametrize("phase", ("before", "after"))
def test_total_agrees(measured, phase) -> None:
    nv, smi = measured[phase]
    for g in nv.gpus:
        assert abs(g.total_mb - smi.gpu(g.index).total_mb) <= AGREE_MB, (g, smi.gpu(g.index))


@pytest.mark.parametrize("phase", ("before", "after"))
def test_used_agrees(measured, phase) -> None:
    nv, smi = measured[phase]
    for g in nv.gpus:
        assert abs(g.used_mb - smi.gpu(g.index).used_mb) <= AGREE_MB, (
            f"gpu{g.index} used: NVML {g.used_mb} MiB vs nvidia-smi {smi.gpu(g.index).used_mb} MiB "
            "(vram.json's raw block has NVML v1/v2 and nvidia-smi's reserved field)")


@pytest.mark.parametrize("source", (0, 1), ids=("nvml", "nvidia-smi"))
def test_delta_is_the_childs_allocation(measured, source) -> None:
    before, after = measured["before"][source], measured["after"][source]
    rise = max(a.used_mb - before.gpu(a.index).used_mb for a in after.gpus)
    assert rise >= ALLOC_GIB * 1024, f"used VRAM rose {rise} MiB, the child holds {ALLOC_GIB} GiB"


@pytest.mark.parametrize("source", (0, 1), ids=("nvml", "nvidia-smi"))
def test_per_process_use_names_the_child(measured, source) -> None:
    reading = measured["after"][source]
    assert reading.apps is not None, "per-process use unreadable"
    pid = measured["pid"]
    assert pid in reading.apps, f"child pid {pid} not among compute processes {reading.apps}"
    assert reading.apps[pid] is not None and reading.apps[pid] >= ALLOC_GIB * 1024, reading.apps


def test_per_process_use_agrees(measured) -> None:
    pid = measured["pid"]
    nv, smi = measured["after"]
    assert abs(nv.apps[pid] - smi.apps[pid]) <= AGREE_MB, (nv.apps, smi.apps)


def test_release_is_seen(measured) -> None:
    """After the child exits, its pid leaves the compute list (what reclaim and the next baseline rely on)."""
    assert measured["released_in_time"]
    for source in (0, 1):
        assert measured["pid"] not in (measured["released"][source].apps or {})
