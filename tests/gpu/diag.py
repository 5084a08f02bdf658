"""The GPU machine as the check saw it, printed as one JSON object (tests/gpu/run_all.sh saves it).

Driver, NVML binding and torch versions; NVML's v1 and v2 memory structs; nvidia-smi's own memory fields
and `-q -d MEMORY` text; and the cost of one read_vram through each source (median of 5), at rest.
"""
from __future__ import annotations

import asyncio
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.model import HostConfig  # noqa: E402
from ops.platform.local import LocalHost  # noqa: E402
from ops.probes.vram import read_vram  # noqa: E402
from tests.gpu.gpuutil import driver_error, nvml_raw, smi_raw  # noqa: E402


def _run(argv: list[str]) -> dict:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-500:]}
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _costs() -> dict:
    host = LocalHost("gpu")
    out = {}
    for source in ("nvml", "nvidia-smi"):
        cfg = HostConfig("gpu", "local", vram_source=source)
        took = []
        for _ in range(5):
            r = asyncio.run(read_vram(cfg, host, timeout=15.0))
            took.append(r.evidence.took_ms)
        out[source] = {"median_ms": round(statistics.median(took), 1), "all_ms": [round(t, 1) for t in took],
                       "last": r.evidence.line()}
    return out


def main() -> int:
    info: dict = {"at": time.strftime("%Y-%m-%d %H:%M:%S %z"), "platform": platform.platform(),
                  "python": sys.version.split()[0], "driver_error": driver_error()}
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            info["driver"] = v.decode() if isinstance(v, bytes) else v
            names = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                n = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                names.append(n.decode() if isinstance(n, bytes) else n)
            info["gpus"] = names
        finally:
            pynvml.nvmlShutdown()
        from importlib.metadata import version
        info["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception as e:
        info["nvml_error"] = f"{type(e).__name__}: {e}"
    info["nvml_raw"] = nvml_raw() if info.get("driver_error") is None else None
    info["smi_raw"] = smi_raw()
    info["smi_memory_q"] = _run(["nvidia-smi", "-q", "-d", "MEMORY"])
    info["read_vram_cost"] = _costs()
    t0 = time.perf_counter()
    try:
        import torch
        info["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                         "import_s": round(time.perf_counter() - t0, 2)}
    except Exception as e:
        info["torch"] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(info, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
