"""Take and hold real GPU memory through one graphics or compute API: the body of the GPU stand-ins.

    python3 gpu_hold.py --api vulkan|gl|cuda --gib G [--ready-file PATH]

vulkan: wgpu (wgpu-native) forced onto its Vulkan backend, as a CARLA server renders (UE4's Vulkan RHI):
        nvidia-smi types it C+G and NVML lists it as compute AND graphics process (H200, driver 580.159.04);
gl:     an OpenGL context through EGL (moderngl, backend egl): type G, in no --query-compute-apps;
cuda:   torch's caching allocator (plain cudaMalloc): type C.
Every byte is written once so the memory is resident, not just reserved. Once held, one JSON line goes to
stdout and to --ready-file (written whole, then renamed); then the process waits for SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

T0 = time.monotonic()
CHUNK = 256 * 2**20   # WebGPU's default max buffer size; also a fine GL/CUDA block


def hold_vulkan(gib: float) -> tuple[object, dict]:
    os.environ.setdefault("WGPU_BACKEND_TYPE", "Vulkan")
    import wgpu
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    info = dict(adapter.info)
    device = adapter.request_device_sync()
    usage = wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.STORAGE
    data = b"\x01" * CHUNK
    bufs = []
    left = int(gib * 2**30)
    while left > 0:
        n = min(CHUNK, left)
        b = device.create_buffer(size=n, usage=usage)
        device.queue.write_buffer(b, 0, data[:n])
        bufs.append(b)
        left -= n
    # Reading back waits for every queued write (wgpu 0.32's on_submitted_work_done_sync is broken).
    back = bytes(device.queue.read_buffer(bufs[-1], 0, 4))
    if back != b"\x01" * 4:
        raise RuntimeError(f"read back {back!r}, wrote 01010101")
    return (adapter, device, bufs), {"backend": info.get("backend_type"), "device_name": info.get("device"),
                                     "adapter_type": info.get("adapter_type"), "wgpu": wgpu.__version__}


def hold_gl(gib: float) -> tuple[object, dict]:
    import moderngl
    ctx = moderngl.create_standalone_context(backend="egl")
    data = b"\x01" * CHUNK
    bufs = []
    left = int(gib * 2**30)
    while left > 0:
        n = min(CHUNK, left)
        b = ctx.buffer(reserve=n)
        b.write(data[:n])
        bufs.append(b)
        left -= n
    ctx.finish()
    return (ctx, bufs), {"backend": "OpenGL/EGL", "device_name": ctx.info.get("GL_RENDERER"),
                         "gl_version": ctx.info.get("GL_VERSION")}


def hold_cuda(gib: float) -> tuple[object, dict]:
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    import torch
    t = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda:0")
    t.fill_(1)
    torch.cuda.synchronize()
    return t, {"backend": "CUDA", "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__}


HOLDERS = {"vulkan": hold_vulkan, "gl": hold_gl, "cuda": hold_cuda}


def write_ready(path: str | None, line: str) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, path)   # a reader never sees half a line


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", choices=sorted(HOLDERS), required=True)
    ap.add_argument("--gib", type=float, required=True)
    ap.add_argument("--ready-file")
    opts = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    held, info = HOLDERS[opts.api](opts.gib)
    info.update(pid=os.getpid(), api=opts.api, asked_mib=int(opts.gib * 1024),
                ready_s=round(time.monotonic() - T0, 3))
    line = json.dumps(info)
    print(f"READY {line}", flush=True)
    write_ready(opts.ready_file, line)
    while not stop.wait(0.5):
        pass
    del held
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
