"""Issue 22 on a real GPU: a Vulkan process's VRAM, counted once and the same through NVML and nvidia-smi.

Two real processes hold memory at once: the Vulkan stand-in (tests/gpu/gpu_hold.py --api vulkan: wgpu on its
Vulkan backend, 6 GiB written; nvidia-smi type C+G, listed by both of NVML's process lists) and an
OpenGL/EGL holder (2 GiB; type G, absent from --query-compute-apps). ops/probes/vram.read_vram reads them
through NVML and through nvidia-smi (`-q -x`): each process once, with its type, the same on both paths, and
the GPU's used memory the same too. The raw outputs are recorded in vulkan.json. Then adapter polling with
the Vulkan stand-in as the server: a candidate that allocates nothing is stopped (no rise), the Vulkan one
is accepted by its rise, and the side's server_mb is its memory once, not twice; a Vulkan stand-in that
takes only 512 MiB is rejected.
"""
from __future__ import annotations

import asyncio

import pytest

from ops.actions.adapter import ACCEPTED, NO_RISE, AdapterReport, poll_adapters
from ops.actions.guard import Confirmation
from ops.config import load_config
from ops.model import HostConfig
from ops.platform.local import LocalHost
from ops.probes.prober import Prober
from ops.probes.vram import VramReading, read_vram
from tests.gpu.gpuutil import (
    AGREE_MB,
    GPU_MARKS,
    HOST,
    NO_GL,
    NO_VULKAN,
    SIDE,
    GpuLive,
    free_port,
    gpu_pids,
    marker_procs,
    nvml_raw,
    record,
    smi_text,
    standin_states,
    start_holder,
    stop_marker_procs,
    wait_gpu_released,
    write_rig,
)

pytestmark = [*GPU_MARKS, pytest.mark.skipif(NO_VULKAN is not None, reason=str(NO_VULKAN))]
VK_GIB, GL_GIB = 6, 2
START_WAIT_S = 15.0   # the Vulkan stand-in held 6 GiB 3.4 s after its start on an H200 (measured)
NVML = HostConfig(HOST, "local", vram_source="nvml")
SMI = HostConfig(HOST, "local", vram_source="nvidia-smi")


def _read_both() -> tuple[VramReading, VramReading]:
    host = LocalHost(HOST)

    async def go():
        return await read_vram(NVML, host, timeout=15.0), await read_vram(SMI, host, timeout=15.0)
    return asyncio.run(go())


def _fig(r: VramReading) -> dict:
    return {"ok": r.ok, "evidence": r.evidence.line(), "took_ms": round(r.evidence.took_ms, 1),
            "gpus": [vars(g) for g in r.gpus], "apps": r.apps, "apps_error": r.apps_error,
            "procs": [vars(p) for p in r.procs or ()]}


def _raw() -> dict:
    return {"nvml": nvml_raw(), "q_x": smi_text("-q", "-x"),
            "compute_apps": smi_text("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"),
            "query_gpu": smi_text("--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits"),
            "table": smi_text()}


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    if NO_GL is not None:
        pytest.skip(NO_GL)
    d = tmp_path_factory.mktemp("vulkan")
    out: dict = {"before": _read_both()}
    vk = start_holder(d, "vulkan", VK_GIB)
    gl = start_holder(d, "gl", GL_GIB)
    try:
        out["vk_ready"], out["gl_ready"] = vk.wait_ready(), gl.wait_ready()
        out["during"] = _read_both()
        out["raw"] = _raw()
    finally:
        out["stopped"] = {"vulkan": vk.stop(), "gl": gl.stop()}
    out["vk"], out["gl"] = vk.pid, gl.pid
    out["released_in_time"] = wait_gpu_released({vk.pid, gl.pid})
    out["after"] = _read_both()
    for phase in ("before", "during", "after"):
        nv, smi = out[phase]
        record("vulkan", phase, {"nvml": _fig(nv), "nvidia_smi": _fig(smi)})
    record("vulkan", "holders", {"vulkan": out["vk_ready"], "gl": out["gl_ready"], "stopped": out["stopped"],
                                 "released_in_time": out["released_in_time"]})
    record("vulkan", "raw", out["raw"])
    return out


def test_both_paths_read(held) -> None:
    for phase in ("before", "during", "after"):
        for r in held[phase]:
            assert r.ok and r.apps is not None, (phase, r.evidence.line())


def test_the_vulkan_process_is_in_both_nvml_lists(held) -> None:
    """The premise: the driver lists a Vulkan process as compute AND graphics, with the same bytes."""
    g = held["raw"]["nvml"][0]
    assert held["vk"] in g["compute"] and held["vk"] in g["graphics"], g
    assert g["compute"][held["vk"]] == g["graphics"][held["vk"]]
    assert held["vk_ready"]["backend"] == "Vulkan", held["vk_ready"]


@pytest.mark.parametrize("source", (0, 1), ids=("nvml", "nvidia-smi"))
def test_the_vulkan_process_counts_once(held, source) -> None:
    r = held["during"][source]
    vk = held["vk"]
    assert {p.type for p in r.procs if p.pid == vk} == {"C+G"}, r.procs
    assert VK_GIB * 1024 <= r.apps[vk] < 2 * VK_GIB * 1024, r.apps      # held once, not summed
    assert r.apps[vk] == held["raw"]["nvml"][0]["compute"][vk] or abs(
        r.apps[vk] - held["raw"]["nvml"][0]["compute"][vk]) <= AGREE_MB


@pytest.mark.parametrize("source", (0, 1), ids=("nvml", "nvidia-smi"))
def test_the_graphics_only_process_is_seen(held, source) -> None:
    r = held["during"][source]
    gl = held["gl"]
    assert {p.type for p in r.procs if p.pid == gl} == {"G"}, r.procs
    assert r.apps.get(gl) is not None and r.apps[gl] >= GL_GIB * 1024, r.apps
    # ...which --query-compute-apps, the old nvidia-smi path, does not list.
    assert f"{gl}," not in held["raw"]["compute_apps"]["stdout"], held["raw"]["compute_apps"]


def test_same_processes_from_both_paths(held) -> None:
    nv, smi = held["during"]
    mine = {held["vk"], held["gl"]}
    assert {(p.pid, p.type) for p in nv.procs if p.pid in mine} == {(p.pid, p.type) for p in smi.procs if p.pid in mine}
    for pid in mine:
        assert abs(nv.apps[pid] - smi.apps[pid]) <= AGREE_MB, (nv.apps, smi.apps)


def test_gpu_used_agrees_and_holds_the_processes(held) -> None:
    nv, smi = held["during"]
    for g in nv.gpus:
        assert abs(g.used_mb - smi.gpu(g.index).used_mb) <= AGREE_MB, (g, smi.gpu(g.index))
    # The processes' memory fits in what the GPU holds: a double-counted Vulkan process would not.
    assert sum(nv.apps[p] for p in (held["vk"], held["gl"])) <= nv.gpus[0].used_mb + AGREE_MB


def test_release_is_seen(held) -> None:
    assert held["released_in_time"]
    for r in held["after"]:
        assert not {held["vk"], held["gl"]} & set(r.apps or {})


# ------------------------------------------------------------------------------------------ adapter polling

def _poll(rig_path) -> tuple[AdapterReport, list[str]]:
    rig = load_config(rig_path)
    hosts = {HOST: LocalHost(HOST, "linux")}
    live = GpuLive(rig, hosts, Prober(rig, hosts))
    events: list[str] = []

    async def go() -> AdapterReport:
        return await poll_adapters(live, SIDE, Confirmation(True, "gpu-check", typed=SIDE),
                                   on_event=lambda e: events.append(f"{e.kind} {e.adapter} {e.detail}"))
    return asyncio.run(go()), events


@pytest.mark.timeout(300)
def test_polling_accepts_the_vulkan_servers_rise(tmp_path) -> None:
    port = free_port()
    rig_path = write_rig(tmp_path, port, plan=f"0={VK_GIB},1=0", candidates=[1, 0], start_wait_s=START_WAIT_S,
                         api="vulkan")
    report, events = _poll(rig_path)
    snap_json = None
    try:
        acc = report.accepted
        alive = {p.pid for p in marker_procs(port)}
        on_gpu = gpu_pids()
        if acc:
            rig = load_config(rig_path)
            hosts = {HOST: LocalHost(HOST, "linux")}
            snap_json = asyncio.run(Prober(rig, hosts).all(rpc=False))[SIDE].to_json()
    finally:
        stopped = stop_marker_procs(port)
        wait_gpu_released({t.server_pid for t in report.tries if t.server_pid})
    record("vulkan", "adapter_accept", {"report": report.to_json(), "events": events, "standins": standin_states(tmp_path),
                                        "alive_after_polling": sorted(alive), "cleanup": stopped,
                                        "server_vram_mb": on_gpu.get(acc.server_pid) if acc else None,
                                        "status_vram": (snap_json or {}).get("vram")})
    assert [(t.adapter, t.verdict) for t in report.tries] == [(1, NO_RISE), (0, ACCEPTED)], report.to_json()
    assert report.tries[0].stopped, report.tries[0]
    assert acc.delta_mb >= VK_GIB * 1024 and alive == {acc.server_pid}, (acc, alive)
    # The status block's server_mb is the Vulkan server's memory once (it is C+G: in both NVML lists).
    assert snap_json is not None
    server_mb = snap_json["vram"]["server_mb"]
    assert server_mb is not None and VK_GIB * 1024 <= server_mb < 2 * VK_GIB * 1024, snap_json["vram"]
    assert server_mb <= snap_json["vram"]["used_mb"], snap_json["vram"]


@pytest.mark.timeout(300)
def test_polling_rejects_a_vulkan_server_that_takes_too_little(tmp_path) -> None:
    """A real Vulkan device with 512 MiB: a rise, but far below vram_min_delta_mb (4096)."""
    port = free_port()
    rig_path = write_rig(tmp_path, port, plan="0=0.5", candidates=[0], start_wait_s=START_WAIT_S, api="vulkan")
    report, events = _poll(rig_path)
    try:
        alive = {p.pid for p in marker_procs(port)}
    finally:
        stopped = stop_marker_procs(port)
        wait_gpu_released({t.server_pid for t in report.tries if t.server_pid})
    record("vulkan", "adapter_reject", {"report": report.to_json(), "events": events, "alive_after_polling": sorted(alive),
                                        "cleanup": stopped})
    (t,) = report.tries
    assert t.verdict == NO_RISE and t.delta_mb is not None and 512 <= t.delta_mb < 4096, t
    assert t.stopped and alive == set() and report.exit_code == 1
