"""Issue 8 (2): adapter polling on a real GPU, judged by the real VRAM delta (NVML), with the GPU stand-in.

One physical GPU: the "candidates" are adapter indices that tests/gpu/standin_server.py interprets:
2 exits 1 at start (a crash), 1 listens but never touches CUDA (a software renderer), 0 allocates 6 GiB on
cuda:0 and listens (the GPU that renders). Polling [2, 1, 0] must accept 0 by its delta, having stopped 1.
A stand-in that allocates only 2 GiB on every candidate must be rejected (below vram_min_delta_mb 4096).
"""
from __future__ import annotations

import asyncio

import pytest

from ops.actions.adapter import ACCEPTED, CRASHED, NO_RISE, AdapterReport, poll_adapters
from ops.actions.guard import Confirmation
from ops.config import load_config
from ops.platform.local import LocalHost
from ops.probes.adapter_record import read_record
from ops.probes.prober import Prober
from tests.gpu.gpuutil import (
    ALLOC_GIB,
    GPU_MARKS,
    HOST,
    SIDE,
    GpuLive,
    compute_pids,
    free_port,
    marker_procs,
    record,
    standin_states,
    stop_marker_procs,
    wait_gpu_released,
    write_rig,
)

pytestmark = GPU_MARKS
START_WAIT_S = 25.0   # torch import + CUDA context + 6 GiB on a fresh machine: ~5-10 s; the stand-in logs it


def _poll(rig_path) -> tuple[AdapterReport, list[str]]:
    rig = load_config(rig_path)
    hosts = {HOST: LocalHost(HOST, "linux")}
    live = GpuLive(rig, hosts, Prober(rig, hosts))
    events: list[str] = []

    async def go() -> AdapterReport:
        return await poll_adapters(live, SIDE, Confirmation(True, "gpu-check", typed=SIDE),
                                   on_event=lambda e: events.append(f"{e.kind} {e.adapter} {e.detail}"))
    return asyncio.run(go()), events


def _figures(report: AdapterReport, events: list[str], d, extra: dict) -> dict:
    return {"report": report.to_json(), "events": events, "standins": standin_states(d), **extra}


@pytest.mark.timeout(300)
def test_polling_picks_the_candidate_that_really_allocates(tmp_path) -> None:
    port = free_port()
    rig_path = write_rig(tmp_path, port, plan=f"0={ALLOC_GIB},1=0,2=exit", candidates=[2, 1, 0],
                         start_wait_s=START_WAIT_S)
    report, events = _poll(rig_path)
    try:
        acc = report.accepted
        alive = {p.pid for p in marker_procs(port)}
        gpu_now = compute_pids()
    finally:
        stopped = stop_marker_procs(port)
        wait_gpu_released({t.server_pid for t in report.tries if t.server_pid})
    record("adapter", "good", _figures(report, events, tmp_path, {"alive_after_polling": sorted(alive),
                                                                  "cleanup": stopped,
                                                                  "server_vram_mb": gpu_now.get(acc.server_pid)
                                                                  if acc else None}))
    assert [(t.adapter, t.verdict) for t in report.tries] == [(2, CRASHED), (1, NO_RISE), (0, ACCEPTED)], report.to_json()
    assert report.exit_code == 0
    idle = report.tries[1]
    assert idle.delta_mb is not None and idle.delta_mb < 4096 and idle.stopped, idle
    assert acc.delta_mb >= ALLOC_GIB * 1024, acc
    assert acc.after[acc.gpu] - acc.baseline[acc.gpu] == acc.delta_mb
    # Only the accepted server is left, and the GPU's process list holds it with its memory.
    assert alive == {acc.server_pid}, (alive, acc)
    assert gpu_now.get(acc.server_pid) is not None and gpu_now[acc.server_pid] >= ALLOC_GIB * 1024, gpu_now
    rec = read_record(load_config(rig_path), SIDE)
    assert rec and rec["adapter"] == 0 and rec["delta_mb"] == acc.delta_mb
    # The stand-in was ready well inside the watch window, so the delta was read on a settled allocation.
    (state,) = [s for s in standin_states(tmp_path) if s["adapter"] == 0]
    assert state["ready_s"] < START_WAIT_S


@pytest.mark.timeout(300)
def test_polling_rejects_a_2_gib_stand_in(tmp_path) -> None:
    port = free_port()
    rig_path = write_rig(tmp_path, port, plan="0=2", candidates=[0], start_wait_s=START_WAIT_S)
    report, events = _poll(rig_path)
    try:
        alive = {p.pid for p in marker_procs(port)}
    finally:
        stopped = stop_marker_procs(port)
        wait_gpu_released({t.server_pid for t in report.tries if t.server_pid})
    record("adapter", "small", _figures(report, events, tmp_path, {"alive_after_polling": sorted(alive),
                                                                   "cleanup": stopped}))
    (t,) = report.tries
    assert t.verdict == NO_RISE, t
    assert 2048 <= t.delta_mb < 4096, t          # the 2 GiB were seen, and judged too little
    assert t.stopped and "terminated" in t.stopped, t
    assert alive == set() and report.exit_code == 1
    assert read_record(load_config(rig_path), SIDE) is None
