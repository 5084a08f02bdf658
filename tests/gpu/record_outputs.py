"""Record what nvidia-smi and NVML say, verbatim, while real processes hold GPU memory (tests/data/nvsmi_vulkan).

    python3 tests/gpu/record_outputs.py DIR            phases idle, vulkan, mixed (GL + CUDA), gl_only, released
    ONLY_VK=1 python3 tests/gpu/record_outputs.py DIR  phases idle, vulkan, vk_gl

Each phase writes DIR/<phase>/: every nvidia-smi form below (<name>.out, and <name>.err with the exit status
when it failed or wrote to stderr), nvml.json (raw bytes) and meta.json (holders, milliseconds per call).
Needs the same machine set-up as run_all.sh (wgpu, moderngl, the Vulkan loader and the driver's ICD).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAP = Path(sys.argv[1])
CAP.mkdir(parents=True, exist_ok=True)
MIB = 2**20
SMI = {
    "table": ["nvidia-smi"],
    "q_x": ["nvidia-smi", "-q", "-x"],
    "q_x_pids": ["nvidia-smi", "-q", "-x", "-d", "PIDS"],     # refused by driver 580 (exit 2): recorded
    "q_pids": ["nvidia-smi", "-q", "-d", "PIDS"],
    "apps": ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
    "apps_named": ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
    "gpu": ["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits"],
    "gpu_mem": ["nvidia-smi", "--query-gpu=index,memory.total,memory.reserved,memory.used,memory.free",
                "--format=csv,noheader,nounits"],
}


def nvml() -> dict:
    import pynvml
    pynvml.nvmlInit()
    try:
        out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": []}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
            v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            g = {"index": i, "name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
                 "v1": {"total": v1.total, "used": v1.used, "free": v1.free},
                 "v2": {"total": v2.total, "reserved": v2.reserved, "used": v2.used, "free": v2.free}}
            for key, fn in (("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                            ("graphics", pynvml.nvmlDeviceGetGraphicsRunningProcesses)):
                try:
                    g[key] = [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory,
                               "gpuInstanceId": getattr(p, "gpuInstanceId", None),
                               "computeInstanceId": getattr(p, "computeInstanceId", None)} for p in fn(h)]
                except Exception as e:
                    g[key] = {"error": f"{type(e).__name__}: {e}"}
            out["gpus"].append(g)
        return out
    finally:
        pynvml.nvmlShutdown()


def capture(phase: str, info: dict) -> None:
    d = CAP / phase
    d.mkdir(exist_ok=True)
    times = {}
    for name, argv in SMI.items():
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, timeout=60)
        times[name] = round((time.perf_counter() - t0) * 1e3, 1)
        (d / f"{name}.out").write_bytes(r.stdout)
        if r.returncode or r.stderr:
            (d / f"{name}.err").write_bytes(f"rc={r.returncode}\n".encode() + r.stderr)
    t0 = time.perf_counter()
    nv = nvml()
    times["nvml"] = round((time.perf_counter() - t0) * 1e3, 1)
    (d / "nvml.json").write_text(json.dumps(nv, indent=1, default=str))
    (d / "meta.json").write_text(json.dumps({"phase": phase, "holders": info, "ms": times}, indent=1))
    print(f"== {phase}: {json.dumps(times)}", flush=True)
    print((d / "table.out").read_text(), flush=True)
    print("apps:", (d / "apps.out").read_text(), "nvml:", json.dumps([{k: g[k] for k in ("compute", "graphics")}
                                                                       for g in nv["gpus"]]), flush=True)


def start(api: str, gib: float) -> tuple[subprocess.Popen, Path]:
    ready = CAP / f"ready-{api}.json"
    ready.unlink(missing_ok=True)   # a ready file of an earlier run must not pass for this holder's
    log = open(CAP / f"hold-{api}.log", "wb")
    p = subprocess.Popen([sys.executable, str(HERE / "gpu_hold.py"), "--api", api, "--gib", str(gib),
                          "--ready-file", str(ready)], stdout=log, stderr=subprocess.STDOUT)
    return p, ready


def wait(p: subprocess.Popen, ready: Path, timeout: float = 120) -> dict | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready.exists():
            return json.loads(ready.read_text())
        if p.poll() is not None:
            return None
        time.sleep(0.1)
    return None


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> None:
    capture("idle", {})
    if os.environ.get("ONLY_VK"):
        vk, vk_ready = start("vulkan", 6)
        info = {"vulkan": wait(vk, vk_ready)}
        print("vulkan:", info, flush=True)
        capture("vulkan", info)
        gl, gl_ready = start("gl", 2)
        info.update(gl=wait(gl, gl_ready))
        capture("vk_gl", info)
        stop(vk)
        stop(gl)
        print("--- vulkan log:", (CAP / "hold-vulkan.log").read_text()[-1500:], flush=True)
        return
    vk, vk_ready = start("vulkan", 6)
    info = {"vulkan": wait(vk, vk_ready)}
    print("vulkan:", info, flush=True)
    capture("vulkan", info)
    gl, gl_ready = start("gl", 2)
    cu, cu_ready = start("cuda", 1)
    info.update(gl=wait(gl, gl_ready), cuda=wait(cu, cu_ready))
    print("mixed:", info, flush=True)
    capture("mixed", info)
    stop(vk)
    stop(cu)
    time.sleep(2)
    capture("gl_only", {"gl": info["gl"]})
    stop(gl)
    time.sleep(3)
    capture("released", {})
    for api in ("vulkan", "gl", "cuda"):
        f = CAP / f"hold-{api}.log"
        print(f"--- {api} log:", f.read_text()[-1500:] if f.exists() else "none", flush=True)


main()
