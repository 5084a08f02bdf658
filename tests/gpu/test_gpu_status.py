"""Issue 8 (3): `status --json` shows real VRAM numbers on a GPU machine.

A one-side rig: a local host read through NVML, the GPU stand-in (6 GiB on cuda:0, listening on the rpc
port) as its running server, the evaluator absent. The CLI itself runs as a subprocess (it needs asyncssh,
through ops.rig; skipped without it); the same snapshot is also taken in-process through ops.probes.prober's
Prober, which needs nothing beyond the repo. The server verdict is UNKNOWN there, honestly: the stand-in
speaks no carla RPC and the machine has no carla client or conda.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from ops.config import load_config
from ops.platform.local import LocalHost
from ops.probes.prober import Prober
from tests.gpu.gpuutil import (
    AGREE_MB,
    ALLOC_GIB,
    GPU_MARKS,
    HOST,
    REPO,
    SIDE,
    free_port,
    nvml_raw,
    record,
    start_standin,
    wait_gpu_released,
    write_rig,
)

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpustatus")
    port = free_port()
    rig_path = write_rig(d, port, plan=f"0={ALLOC_GIB}", candidates=[0])
    server = start_standin(d, port, adapter=0, plan=f"0={ALLOC_GIB}")
    try:
        ready = server.wait_ready()
        yield {"rig": rig_path, "server": server, "ready": ready, "port": port}
    finally:
        server.stop()
        wait_gpu_released({server.pid})


def _check_vram_block(v: dict, server_pid: int, direct: list[dict]) -> None:
    assert v["used_mb"] is not None and v["total_mb"] is not None, v
    assert v["used_mb"] >= ALLOC_GIB * 1024, v
    assert v["total_mb"] > v["used_mb"], v
    assert v["server_mb"] is not None and v["server_mb"] >= ALLOC_GIB * 1024, v
    assert v["gpu"], v
    assert v["evidence"] and v["evidence"].startswith("NVML"), v
    # The numbers are the GPU's own: a direct NVML read right after agrees with them.
    # (Which NVML struct, v1 with the driver's reserved memory or v2 without, is test_gpu_vram's question.)
    g0 = direct[0]
    used = [s["used"] for s in (g0["v1"], g0["v2"]) if "used" in s]
    assert any(abs(u - v["used_mb"]) <= AGREE_MB for u in used) and g0["v1"]["total"] == v["total_mb"], (v, direct)
    assert direct[0]["compute"].get(server_pid) == v["server_mb"], (v, direct)


@pytest.mark.timeout(300)
def test_status_json_cli_shows_real_vram(running) -> None:
    if importlib.util.find_spec("asyncssh") is None:
        pytest.skip("the status CLI imports asyncssh (ops.rig builds every host kind): carry its wheel")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-m", "console", "-c", str(running["rig"]), "status", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO), env=env)
    direct = nvml_raw()
    record("status", "cli", {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-2000:],
                             "server_pid": running["server"].pid, "nvml_after": direct})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    side = out["sides"][SIDE]
    assert side["server"]["pid"] == running["server"].pid and side["server"]["adapter"] == 0, side["server"]
    _check_vram_block(side["vram"], running["server"].pid, direct)


@pytest.mark.timeout(120)
def test_snapshot_json_shows_real_vram(running) -> None:
    rig = load_config(running["rig"])
    hosts = {HOST: LocalHost(HOST, "linux")}
    snaps = asyncio.run(Prober(rig, hosts).all(rpc=False))
    j = snaps[SIDE].to_json()
    direct = nvml_raw()
    record("status", "prober", {"json": j, "server_pid": running["server"].pid, "nvml_after": direct})
    assert j["server"]["pid"] == running["server"].pid
    _check_vram_block(j["vram"], running["server"].pid, direct)
