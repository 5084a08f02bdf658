"""Markdown tables from the figures of one GPU run: `python3 tests/gpu/summary.py DIR` (DIR = $OUT there).

Reads DIR/diag.json, vram.json, vulkan.json, adapter.json, status.json and the last line of pytest.log;
whatever is missing is said so, never filled in.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(d: Path, name: str) -> dict | None:
    try:
        return json.loads((d / name).read_text())
    except (OSError, ValueError):
        return None


def _g0(reading: dict, key: str):
    gpus = reading.get("gpus") or []
    return gpus[0].get(key) if gpus else None


def vram_section(v: dict | None) -> list[str]:
    out = ["## 1. NVML vs nvidia-smi (ops/probes/vram.read_vram, LocalHost)", ""]
    if not v:
        return out + ["(no vram.json: the test did not get that far)", ""]
    out += ["| phase | NVML used / total MiB | nvidia-smi used / total MiB | diff used / total | raw NVML v1 used | "
            "raw NVML v2 used (reserved) | nvidia-smi raw (index, total, reserved, used, free) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    raw = v.get("raw", {})
    for phase in ("before", "after", "released"):
        p = v.get(phase)
        if not p:
            out.append(f"| {phase} | (missing) | | | | | |")
            continue
        nv, smi = p["nvml"], p["nvidia_smi"]
        diff = next(iter(p["diff"].values()), {}) if p.get("diff") else {}
        r = raw.get(phase, {})
        g = (r.get("nvml") or [{}])[0]
        v1, v2 = g.get("v1", {}), g.get("v2", {})
        v2s = f"{v2['used']} ({v2['reserved']})" if "used" in v2 else v2.get("error", "?")
        out.append(f"| {phase} | {_g0(nv, 'used_mb')} / {_g0(nv, 'total_mb')} | {_g0(smi, 'used_mb')} / "
                   f"{_g0(smi, 'total_mb')} | {diff.get('used')} / {diff.get('total')} | {v1.get('used')} | {v2s} | "
                   f"{(r.get('nvidia_smi') or {}).get('stdout', '?')} |")
    dl = v.get("delta", {})
    child = v.get("child", {})
    out += ["", f"- delta (after - before), gpu0: NVML {dl.get('nvml', {}).get('0')} MiB, nvidia-smi "
            f"{dl.get('nvidia_smi', {}).get('0')} MiB; the child (pid {child.get('pid')}, {child.get('ready', {}).get('asked_mib')} "
            f"MiB asked, ready in {child.get('ready', {}).get('ready_s')} s) holds NVML {dl.get('child_nvml_mb')} MiB / "
            f"nvidia-smi {dl.get('child_smi_mb')} MiB in the per-process list",
            f"- read cost: NVML {v['after']['nvml']['took_ms']} ms, nvidia-smi (`--query-gpu` + `-q -x`) "
            f"{v['after']['nvidia_smi']['took_ms']} ms (after phase)" if v.get("after") else "", ""]
    return out


def _procs(r: dict) -> str:
    return ", ".join(f"{p['pid']} {p['type']} {p['used_mb']} MiB" for p in r.get("procs") or []) or "none"


def vulkan_section(v: dict | None) -> list[str]:
    out = ["## 2. A Vulkan process (C+G) and an OpenGL process (G): per-process VRAM through both paths (issue 22)", ""]
    if not v:
        return out + ["(no vulkan.json: the Vulkan test did not run: wgpu/moderngl not importable, or no driver)", ""]
    h = v.get("holders", {})
    vk, gl = h.get("vulkan") or {}, h.get("gl") or {}
    out += [f"- holders: Vulkan pid {vk.get('pid')} ({vk.get('backend')} on {vk.get('device_name')}, "
            f"{vk.get('adapter_type')}, wgpu {vk.get('wgpu')}; {vk.get('asked_mib')} MiB asked, ready in "
            f"{vk.get('ready_s')} s); GL pid {gl.get('pid')} ({gl.get('backend')}, {gl.get('device_name')}, "
            f"{gl.get('gl_version')}; {gl.get('asked_mib')} MiB asked, ready in {gl.get('ready_s')} s)", "",
            "| phase | path | GPU used / total MiB | processes (pid type MiB) | read cost ms |",
            "| --- | --- | --- | --- | --- |"]
    for phase in ("before", "during", "after"):
        p = v.get(phase) or {}
        for key, label in (("nvml", "NVML"), ("nvidia_smi", "nvidia-smi (`--query-gpu` + `-q -x`)")):
            r = p.get(key)
            if not r:
                out.append(f"| {phase} | {label} | (missing) | | |")
                continue
            g = (r.get("gpus") or [{}])[0]
            out.append(f"| {phase} | {label} | {g.get('used_mb')} / {g.get('total_mb')} | {_procs(r)} | {r.get('took_ms')} |")
    raw = v.get("raw") or {}
    nv = (raw.get("nvml") or [{}])[0]
    out += ["", f"- raw NVML lists during: compute {nv.get('compute')}, graphics {nv.get('graphics')} (MiB): the "
            "Vulkan process is in both, the GL one in graphics only; the old code summed the lists",
            f"- raw `--query-compute-apps` during: `{(raw.get('compute_apps') or {}).get('stdout', '?').strip()}` "
            "(the G process is not there; `-q -x` lists it)"]
    for key, title in (("adapter_accept", "adapter polling, candidates [1, 0] (1 takes nothing, 0 = Vulkan 6 GiB)"),
                       ("adapter_reject", "adapter polling, candidate [0] = Vulkan 512 MiB")):
        run = v.get(key)
        out += ["", f"### {title}", ""]
        if not run:
            out += ["(missing)"]
            continue
        out += ["| candidate | verdict | baseline MiB | after MiB | delta MiB | detail |", "| --- | --- | --- | --- | --- | --- |"]
        for t in run["report"]["tries"]:
            out.append(f"| {t['adapter']} | {t['verdict']} | {t['baseline_mb']} | {t['after_mb']} | {t['delta_mb']} | "
                       f"{t['detail']} |")
        if run.get("status_vram"):
            out += ["", f"- the side's status vram block after acceptance: `{json.dumps(run['status_vram'])}`"]
    return out + [""]


def adapter_section(a: dict | None) -> list[str]:
    out = ["## 3. Adapter polling with the CUDA stand-in (vram_source nvml, vram_min_delta_mb 4096)", ""]
    if not a:
        return out + ["(no adapter.json)", ""]
    for key, title in (("good", "candidates [2, 1, 0]: 2 exits 1, 1 allocates nothing, 0 allocates 6 GiB"),
                       ("small", "candidate [0] allocating only 2 GiB")):
        run = a.get(key)
        out += [f"### {title}", ""]
        if not run:
            out += ["(missing)", ""]
            continue
        rep = run["report"]
        out += ["| candidate | verdict | baseline MiB | after MiB | delta MiB | detail |", "| --- | --- | --- | --- | --- | --- |"]
        for t in rep["tries"]:
            out.append(f"| {t['adapter']} | {t['verdict']} | {t['baseline_mb']} | {t['after_mb']} | {t['delta_mb']} | "
                       f"{t['detail']} |")
        ready = {s["adapter"]: s.get("ready_s") for s in run.get("standins", [])}
        out += ["", f"- accepted: {rep['accepted']}; stand-ins ready after (s, by adapter): {ready}; "
                f"left running after polling: {run.get('alive_after_polling')}; server's per-process VRAM: "
                f"{run.get('server_vram_mb')}", ""]
    return out


def status_section(s: dict | None) -> list[str]:
    out = ["## 4. `status --json` with the CUDA stand-in running (6 GiB)", ""]
    if not s:
        return out + ["(no status.json)", ""]
    for key, title in (("cli", "`python3 -m console -c rig.yaml status --json`"), ("prober", "in-process Prober")):
        run = s.get(key)
        if not run:
            out += [f"- {title}: (missing)"]
            continue
        if key == "cli":
            try:
                side = json.loads(run["stdout"])["sides"]["G"]
            except (ValueError, KeyError, TypeError):
                out += [f"- {title}: rc {run.get('rc')}, unreadable output: {run.get('stderr', '')[-300:]!r}"]
                continue
        else:
            side = run["json"]
        out += [f"- {title}: vram `{json.dumps(side['vram'])}`; server {side['server']['state']} pid "
                f"{side['server']['pid']} adapter {side['server']['adapter']} ({side['server']['summary']})"]
    return out + [""]


def main(d: Path) -> int:
    diag = _load(d, "diag.json") or {}
    lines = ["# GPU run figures", ""]
    torch = diag.get("torch", {})
    lines += [f"- machine: {diag.get('gpus')} driver {diag.get('driver')}, nvidia-ml-py {diag.get('nvidia_ml_py')}, "
              f"torch {torch.get('version')} (CUDA {torch.get('cuda')}), python {diag.get('python')}, "
              f"{diag.get('platform')}, at {diag.get('at')}"]
    cost = diag.get("read_vram_cost", {})
    if cost:
        lines += [f"- read_vram at rest, median of 5: NVML {cost.get('nvml', {}).get('median_ms')} ms, nvidia-smi "
                  f"{cost.get('nvidia-smi', {}).get('median_ms')} ms"]
    try:
        tail = [ln for ln in (d / "pytest.log").read_text().splitlines() if ln.strip()][-1]
    except (OSError, IndexError):
        tail = "(no pytest.log)"
    lines += [f"- pytest: `{tail.strip('= ')}`", ""]
    lines += vram_section(_load(d, "vram.json"))
    lines += vulkan_section(_load(d, "vulkan.json"))
    lines += adapter_section(_load(d, "adapter.json"))
    lines += status_section(_load(d, "status.json"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
