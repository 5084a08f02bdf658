"""A CARLA server stand-in that really takes GPU memory: what tests/gpu runs where a real GPU exists.

The sim rig's fake server (sim/fake_server.py) only writes a VRAM ledger that a fake nvidia-smi reads;
on a real GPU the console must see real memory move, through the real NVML and the real nvidia-smi. This
stand-in does that, and nothing else a CARLA server does (no RPC protocol: the carla client is not on the
GPU machine, so a server probe of it says UNKNOWN, never ALIVE).

    python3 standin_server.py [--plan SPEC] [--api cuda|vulkan|gl] [--state-dir DIR] [--ready-file PATH]
                              [--device cuda:0] -carla-rpc-port=N -graphicsadapter=K [other UE4-style flags]

--api says through what the memory is taken (tests/gpu/gpu_hold.py): cuda (torch on --device, a C process),
vulkan (wgpu on its Vulkan backend, a C+G process: what a CARLA server is), gl (OpenGL/EGL, a G process).
--plan maps each adapter index to what the "server" does on it: `K=GIB` allocates GIB GiB through --api
(0: never touches the GPU at all, like a server that fell back to a software renderer) and listens on
127.0.0.1:N; `K=exit` exits 1 after 0.3 s, before listening (a crash at start). An adapter absent from the
plan exits 1 too. Default plan: `0=6,1=0,2=exit`.

There is one physical GPU on the test machine: the adapter index is only interpreted by this plan; every
allocation lands on --device whatever K says.

Once the memory is held and the port listens it writes one JSON line (pid, adapter, MiB asked, seconds from
start to ready) to --ready-file and to DIR/standin-<pid>.json, then holds everything until SIGTERM/SIGINT,
and exits 0 (the process exit releases the memory).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

T0 = time.monotonic()
DEFAULT_PLAN = "0=6,1=0,2=exit"
EXIT = "exit"


def parse_plan(spec: str) -> dict[int, float | str]:
    plan: dict[int, float | str] = {}
    for part in spec.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            raise ValueError(f"plan entry {part!r} is not K=GIB or K=exit")
        plan[int(k)] = EXIT if v.strip() == EXIT else float(v)
    return plan


def ue4_flag(argv: list[str], name: str) -> str | None:
    """`-name=value`, case-insensitive like UE4; the last one wins."""
    found = None
    for tok in argv:
        key, sep, value = tok.partition("=")
        if sep and key.lower() == f"-{name.lower()}":
            found = value
    return found


def log(msg: str) -> None:
    print(f"[standin {os.getpid()} +{time.monotonic() - T0:.2f}s] {msg}", flush=True)


def main(argv: list[str]) -> int:
    # UE4-style single-dash flags never reach argparse: it would try to read `-carla-rpc-port=N` as `-c ...`.
    rest = [t for t in argv if t.startswith("-") and not t.startswith("--")]
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--plan", default=DEFAULT_PLAN)
    ap.add_argument("--state-dir")
    ap.add_argument("--ready-file")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--api", choices=("cuda", "vulkan", "gl"), default="cuda")
    opts = ap.parse_args([t for t in argv if t not in rest])
    port_s, adapter_s = ue4_flag(rest, "carla-rpc-port"), ue4_flag(rest, "graphicsadapter")
    if port_s is None or adapter_s is None:
        log(f"need -carla-rpc-port=N and -graphicsadapter=K, got {rest}")
        return 2
    port, adapter = int(port_s), int(adapter_s)
    plan = parse_plan(opts.plan)
    what = plan.get(adapter)
    log(f"adapter {adapter} port {port} plan {opts.plan!r} -> {what!r}")
    if what is None or what == EXIT:
        time.sleep(0.3)
        log("exit 1 (crash at start)")
        return 1

    stop = False

    def on_signal(signum, _frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    held = None
    gib = float(what)
    info: dict = {"pid": os.getpid(), "adapter": adapter, "port": port, "asked_mib": int(gib * 1024),
                  "api": opts.api, "device": None, "device_name": None, "torch": None}
    if gib > 0 and opts.api != "cuda":
        import gpu_hold  # beside this file; only here: the "software renderer" adapter loads no GPU API
        held, got = gpu_hold.HOLDERS[opts.api](gib)
        info.update(device=got.get("backend"), device_name=got.get("device_name"),
                    **{k: v for k, v in got.items() if k not in ("backend", "device_name")})
        log(f"holding {gib:g} GiB through {opts.api} ({info['device_name']})")
    elif gib > 0:
        # NVML numbers GPUs in PCI order; make CUDA's cuda:0 the same GPU (it is CUDA's "fastest first" otherwise).
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        import torch  # only here: a "software renderer" adapter must not create a CUDA context at all
        dev = torch.device(opts.device)
        # A plain cudaMalloc through torch's allocator (never managed memory), written once so it is resident.
        held = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=dev)
        held.fill_(1)
        torch.cuda.synchronize(dev)
        info.update(device=str(dev), device_name=torch.cuda.get_device_name(dev), torch=torch.__version__,
                    torch_reserved_mib=torch.cuda.memory_reserved(dev) // 2**20)
        log(f"holding {gib:g} GiB on {dev} ({info['device_name']})")

    srv = socket.create_server(("127.0.0.1", port), backlog=16)
    srv.settimeout(0.2)
    info["ready_s"] = round(time.monotonic() - T0, 3)
    line = json.dumps(info)
    if opts.state_dir:
        Path(opts.state_dir).mkdir(parents=True, exist_ok=True)
        Path(opts.state_dir, f"standin-{os.getpid()}.json").write_text(line + "\n")
    if opts.ready_file:
        tmp = Path(opts.ready_file + ".tmp")
        tmp.write_text(line + "\n")
        os.replace(tmp, opts.ready_file)   # a reader never sees half a line
    log(f"ready: {line}")
    conns = []
    while not stop:
        try:
            c, _ = srv.accept()
            conns.append(c)   # hold it open, as a server would; the probes only connect and close
        except TimeoutError:
            pass
        except InterruptedError:
            pass
    for c in conns:
        c.close()
    srv.close()
    del held
    log("stopped by signal, exit 0")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
