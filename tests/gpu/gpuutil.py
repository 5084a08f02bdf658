"""Helpers of the real-GPU check (tests/gpu): driver detection, figures, ports, the stand-in's lifecycle.

Imports only the stdlib, psutil, pyyaml, pynvml and this repo's `ops` (never asyncssh or textual), so the
check runs on the GPU machine with nothing carried but the repo; only the `status --json` CLI test needs
asyncssh (ops.rig imports every host kind) and skips without it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

from ops.model import RigConfig
from ops.platform.base import Host
from ops.probes.prober import Prober

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STANDIN = HERE / "standin_server.py"
MIB = 2**20
AGREE_MB = 64          # issue 8: NVML and nvidia-smi agree within this, on total and used
ALLOC_GIB = 6          # what the child / the good candidate allocates
SIDE = "G"
HOST = "gpu"


def driver_error() -> str | None:
    """None when NVML initialises (an NVIDIA driver is present), else why not: the skip reason."""
    try:
        import pynvml
    except Exception as e:  # nvidia-ml-py missing or broken
        return f"pynvml not importable: {type(e).__name__}: {e}"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA driver here
        return f"no NVIDIA driver (nvmlInit raised {type(e).__name__}: {e})"
    try:
        pynvml.nvmlShutdown()
    except Exception as e:
        return f"nvmlShutdown raised {type(e).__name__}: {e}"
    return None


NO_DRIVER = driver_error()
# The Vulkan stand-in needs the wgpu package (its Vulkan backend, the Vulkan loader and the driver's ICD:
# README's GPU section says how they were carried); without it only the Vulkan tests skip.
NO_VULKAN = None if importlib.util.find_spec("wgpu") else "wgpu is not importable (carry its wheel: README, GPU)"
NO_GL = None if importlib.util.find_spec("moderngl") else "moderngl is not importable (carry its wheel: README, GPU)"
HOLD = HERE / "gpu_hold.py"
# Every module of tests/gpu sets `pytestmark = GPU_MARKS`.
GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(NO_DRIVER is not None, reason=str(NO_DRIVER))]


# ------------------------------------------------------------------------------------------ figures

def record(name: str, key: str, value) -> None:
    """Add one figure to $GPU_FIGURES_DIR/<name>.json (nothing when unset: a plain pytest run)."""
    d = os.environ.get("GPU_FIGURES_DIR")
    if not d:
        return
    path = Path(d) / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def nvml_raw() -> list[dict]:
    """NVML's memory structs as they are, v1 and v2 side by side, plus the compute and the graphics
    processes, each list as NVML gives it (MiB, floored): a Vulkan process is in both.

    v1 `used` counts the driver's reserved memory, v2 `used` does not (nvidia-smi's memory.used is the v2
    one): keeping both lets one run say which one ops/probes/vram.py must read.
    """
    import pynvml
    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
            g: dict = {"index": i, "v1": {"total": v1.total // MIB, "used": v1.used // MIB, "free": v1.free // MIB}}
            try:
                v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                g["v2"] = {"total": v2.total // MIB, "reserved": v2.reserved // MIB, "used": v2.used // MIB,
                           "free": v2.free // MIB}
            except Exception as e:  # an old driver or binding: recorded, not hidden
                g["v2"] = {"error": f"{type(e).__name__}: {e}"}
            g["compute"] = {int(p.pid): (None if p.usedGpuMemory is None else p.usedGpuMemory // MIB)
                            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            g["graphics"] = {int(p.pid): (None if p.usedGpuMemory is None else p.usedGpuMemory // MIB)
                             for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)}
            out.append(g)
        return out
    finally:
        pynvml.nvmlShutdown()


def smi_raw() -> dict:
    """nvidia-smi's own memory fields (reserved and free too), for the record."""
    argv = ["nvidia-smi", "--query-gpu=index,memory.total,memory.reserved,memory.used,memory.free",
            "--format=csv,noheader,nounits"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"argv": argv, "error": f"{type(e).__name__}: {e}"}
    return {"argv": argv, "rc": r.returncode, "stdout": r.stdout.strip(), "stderr": r.stderr.strip()[-500:]}


def compute_pids() -> dict[int, int | None]:
    return {pid: mb for g in nvml_raw() for pid, mb in g["compute"].items()}


def gpu_pids() -> dict[int, int | None]:
    """Every process on a GPU, compute or graphics, once (a C+G one is in both lists with the same bytes)."""
    out: dict[int, int | None] = {}
    for g in nvml_raw():
        for listing in (g["compute"], g["graphics"]):
            out.update(listing)
    return out


def wait_gpu_released(pids: set[int], timeout: float = 20.0) -> bool:
    """Until none of these pids holds GPU memory any more, as compute or graphics process (the driver frees
    a dead process's memory asynchronously: a baseline read too early would still count it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pids & set(gpu_pids()):
            return True
        time.sleep(0.2)
    return False


# ------------------------------------------------------------------------------------------ processes

def kill_exact(pid: int, create_time: float | None, grace: float = 10.0) -> str:
    """TERM, then KILL, exactly this process, after checking its start time (a reused pid is left alone)."""
    try:
        p = psutil.Process(pid)
        if create_time is not None and abs(p.create_time() - create_time) > 0.05:
            return "pid reused: left alone"
        p.terminate()
        try:
            p.wait(grace)
            return "terminated"
        except psutil.TimeoutExpired:
            p.kill()
            p.wait(5)
            return "killed"
    except psutil.NoSuchProcess:
        return "already gone"


def marker_procs(port: int) -> list[psutil.Process]:
    """Live processes carrying exactly `-carla-rpc-port=<port>` (the tests pick a port nothing else uses)."""
    token = f"-carla-rpc-port={port}"
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if token in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def stop_marker_procs(port: int) -> list[dict]:
    """Stop every process of ours on this port (by pid + start time) and say what happened to each."""
    out = []
    for p in marker_procs(port):
        try:
            ct = p.create_time()
        except psutil.NoSuchProcess:
            continue
        out.append({"pid": p.pid, "outcome": kill_exact(p.pid, ct)})
    return out


def _free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port() -> int:
    """N with N, N+1, N+2 (server) and N+10 (TM) all free."""
    for _ in range(500):
        base = random.randrange(21000, 39000)
        if all(_free(p) for p in (base, base + 1, base + 2, base + 10)):
            return base
    raise RuntimeError("no free port block found")


@dataclass
class StandIn:
    proc: subprocess.Popen
    create_time: float
    ready_file: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 180.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                return json.loads(self.ready_file.read_text())
            if self.proc.poll() is not None:
                raise AssertionError(f"stand-in exited rc={self.proc.returncode}: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise AssertionError(f"stand-in not ready after {timeout} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> str:
        outcome = kill_exact(self.pid, self.create_time)
        self.proc.wait(10)   # our child: reap it
        return outcome


def start_standin(d: Path, port: int, adapter: int, plan: str, api: str = "cuda") -> StandIn:
    d.mkdir(parents=True, exist_ok=True)
    ready, log = d / f"ready-{port}-{adapter}.json", d / f"standin-{port}-{adapter}.log"
    argv = [sys.executable, str(STANDIN), "--plan", plan, "--api", api, "--state-dir", str(d / "standins"),
            "--ready-file", str(ready), f"-carla-rpc-port={port}", f"-graphicsadapter={adapter}"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(REPO))
    try:
        ct = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        ct = None
    return StandIn(proc, ct, ready, log)


def standin_states(d: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((d / "standins").glob("standin-*.json"))]


# ------------------------------------------------------------------------------------------ the rig

def write_rig(d: Path, port: int, plan: str, candidates: list[int], start_wait_s: float = 25.0,
              min_delta_mb: int = 4096, api: str = "cuda") -> Path:
    """A one-side rig on this machine: local host read through NVML, the stand-in as the server command,
    an evaluator that is never started (its side reads DEAD)."""
    d.mkdir(parents=True, exist_ok=True)
    rig = {
        "version": 1, "name": "gpu-check", "state_dir": str(d / "state"), "poll_s": 1.0,
        "hosts": {HOST: {"type": "local", "os": "linux", "vram_source": "nvml"}},
        "sides": {SIDE: {
            "server": {"host": HOST,
                       "command": [sys.executable, str(STANDIN), "--plan", plan, "--api", api,
                                   "--state-dir", str(d / "standins")],
                       "rpc_port": port, "adapter_candidates": candidates, "vram_min_delta_mb": min_delta_mb,
                       "start_wait_s": start_wait_s, "probe_timeout_s": 5.0},
            "evaluator": {"host": HOST, "conda_env": "gpu-check", "cwd": str(d), "script": "evaluator_absent.py",
                          "routes": "routes.xml", "checkpoint": "checkpoint.json", "log": "evaluator.log",
                          "tm_port": port + 10}}},
    }
    path = d / "rig.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    return path


@dataclass
class GpuLive:
    """What ops.rig.LiveRig gives adapter polling (config, hosts, prober), without importing ops.rig:
    that module builds every host kind, ssh's asyncssh included, which the GPU machine does not have."""
    config: RigConfig
    hosts: dict[str, Host]
    prober: Prober


def start_holder(d: Path, api: str, gib: float) -> StandIn:
    """tests/gpu/gpu_hold.py holding `gib` GiB through `api` (vulkan: C+G, gl: G, cuda: C)."""
    d.mkdir(parents=True, exist_ok=True)
    ready, log = d / f"hold-{api}.json", d / f"hold-{api}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, str(HOLD), "--api", api, "--gib", str(gib), "--ready-file", str(ready)],
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO))
    try:
        ct = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        ct = None
    return StandIn(proc, ct, ready, log)


def smi_text(*args: str) -> dict:
    """One nvidia-smi call's raw stdout, for the record (and for tests/data recordings)."""
    argv = ["nvidia-smi", *args]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"argv": argv, "error": f"{type(e).__name__}: {e}"}
    return {"argv": argv, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-500:]}
