"""Issue 22 on recorded real outputs: a Vulkan (C+G) process counts once, a graphics-only (G) one is seen,
and NVML and the nvidia-smi path give the same rows.

tests/data/nvsmi_vulkan/ holds what an H200 (driver 580.159.04) answered while real processes held memory
(SOURCES.md): `h200_vulkan_cg` a wgpu program on Vulkan holding 6 GiB (nvidia-smi type C+G, in both NVML
lists); `h200_gl_g_cuda_c` an OpenGL/EGL program holding 2 GiB (type G, in no --query-compute-apps) beside
a CUDA one holding 1 GiB (type C); `h200_vulkan_cg_gl_g` the Vulkan and the GL program at once (the
tests/gpu run's own record). Each case has `nvidia-smi -q -x`, `--query-compute-apps`, `--query-gpu`
and NVML's two process lists (raw bytes), so both read_vram paths run on them: NVML through a stand-in
module replaying the recorded lists, nvidia-smi through a host replaying the recorded stdout.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ops.model import HostConfig
from ops.parse import ParseError, parse_query_xml
from ops.parse.nvsmi import QUERY_XML_ARGS
from ops.platform.base import Host, Result
from ops.platform.common import SpawnError
from ops.probes import vram
from ops.probes.vram import GpuProc, merge_procs, nvml_rows, per_pid, read_vram, smi_rows
from tests.support.nvsmi_csv import QUERY_GPU_ARGS, parse_compute_apps, parse_query_gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "nvsmi_vulkan"
MIB = 2**20
VULKAN_PID, GL_PID, CUDA_PID = 784, 573, 574


def case(name: str) -> dict:
    c = {"xml": (DATA / f"{name}.q_x.xml").read_bytes(),
         "apps": (DATA / f"{name}.compute_apps.csv").read_text(),
         "gpu": (DATA / f"{name}.query_gpu.csv").read_text()}
    raw = DATA / f"{name}.nvml.json"
    c["nvml"] = json.loads(raw.read_text()) if raw.exists() else _from_mib(name, c["gpu"])
    return c


def _from_mib(name: str, query_gpu: str) -> dict:
    """tests/gpu's own record (gpuutil.nvml_raw: MiB, floored; pid → MiB per list) in nvml.json's shape,
    each value back in bytes as whole MiB (flooring it again gives the recorded MiB)."""
    names = {g.index: g.name for g in parse_query_gpu(query_gpu)}
    gpus = []
    for g in json.loads((DATA / f"{name}.nvml_mib.json").read_text()):
        gpus.append({"index": g["index"], "name": names[g["index"]],
                     "v1": {k: v * MIB for k, v in g["v1"].items()}, "v2": {k: v * MIB for k, v in g["v2"].items()},
                     **{kind: [{"pid": int(pid), "usedGpuMemory": None if mb is None else mb * MIB}
                               for pid, mb in g[kind].items()] for kind in ("compute", "graphics")}})
    return {"gpus": gpus}


VK = case("h200_vulkan_cg")
GL = case("h200_gl_g_cuda_c")
BOTH = case("h200_vulkan_cg_gl_g")     # one moment, a C+G and a G process side by side (tests/gpu run)
BOTH_VK, BOTH_GL = 675, 676
CASES = ["h200_vulkan_cg", "h200_gl_g_cuda_c", "h200_vulkan_cg_gl_g"]


def nvml_lists(c: dict, gpu: int = 0) -> tuple[list, list]:
    g = c["nvml"]["gpus"][gpu]
    as_obj = [SimpleNamespace(**p) for p in g["compute"]], [SimpleNamespace(**p) for p in g["graphics"]]
    return as_obj


# ------------------------------------------------------------------------------ the recordings themselves

def test_the_recordings_show_the_two_problems() -> None:
    """What the issue says, read off the raw recordings: the Vulkan process is in both NVML lists with the
    same bytes and typed C+G; the GL process is typed G and absent from --query-compute-apps."""
    compute, graphics = nvml_lists(VK)
    assert [(p.pid, p.usedGpuMemory) for p in compute] == [(p.pid, p.usedGpuMemory) for p in graphics]
    assert compute[0].pid == VULKAN_PID and compute[0].usedGpuMemory // MIB == 6358
    assert b"<type>C+G</type>" in VK["xml"] and VK["apps"] == f"{VULKAN_PID}, 6358\n"
    assert b"<pid>573</pid>" in GL["xml"] and b"<type>G</type>" in GL["xml"]
    assert [a.pid for a in parse_compute_apps(GL["apps"])] == [CUDA_PID]     # the G process is missing
    g = BOTH["nvml"]["gpus"][0]
    assert {p["pid"] for p in g["compute"]} == {BOTH_VK} and {p["pid"] for p in g["graphics"]} == {BOTH_VK, BOTH_GL}
    assert [a.pid for a in parse_compute_apps(BOTH["apps"])] == [BOTH_VK]


def test_one_moment_with_a_c_plus_g_and_a_g_process() -> None:
    """The recording with both at once: each once, typed, the same from NVML and from `-q -x`, and their
    sum within what the GPU holds (a summed C+G process would be 6358 MiB too much)."""
    rows = nvml_rows(0, *nvml_lists(BOTH))
    assert rows == smi_rows(parse_query_xml(BOTH["xml"]))
    assert [(p.pid, p.type, p.used_mb) for p in rows] == [(BOTH_VK, "C+G", 6358), (BOTH_GL, "G", 2055)]
    (gpu,) = parse_query_gpu(BOTH["gpu"])
    assert gpu.used_mb == 8449 and sum(per_pid(rows).values()) == 8413 <= gpu.used_mb


# ------------------------------------------------------------------------------ the XML parser

def test_xml_of_a_vulkan_process() -> None:
    log = parse_query_xml(VK["xml"])
    assert not isinstance(log, ParseError), log
    assert log.driver_version == "580.159.04"
    (g,) = log.gpus
    assert (g.index, g.name, g.total_mb, g.used_mb) == (0, "NVIDIA H200", 143771, 6381)
    assert g.uuid == "GPU-8aa8864d-7a3d-55b7-7298-7b0875ebfd12" and g.bus_id == "00000000:00:06.0"
    (p,) = g.processes
    assert (p.pid, p.type, p.used_mb, p.instance) == (VULKAN_PID, "C+G", 6358, (None, None))
    assert p.process_name == "/opt/torch/.venv/bin/python3"


def test_xml_of_a_graphics_only_and_a_compute_process() -> None:
    (g,) = parse_query_xml(GL["xml"]).gpus
    assert [(p.pid, p.type, p.used_mb) for p in g.processes] == [(GL_PID, "G", 2055), (CUDA_PID, "C", 1634)]


def test_xml_of_an_idle_gpu_is_an_empty_list_not_unknown() -> None:
    (g,) = parse_query_xml((DATA / "h200_idle.q_x.xml").read_bytes()).gpus
    assert g.processes == () and g.used_mb == 0


@pytest.mark.parametrize("mutate, reason", [
    (lambda x: x[: len(x) // 2], "not well-formed"),
    (lambda x: x.replace(b"<pid>784</pid>", b"<pid>78x</pid>"), "pid is not"),
    (lambda x: x.replace(b"<type>C+G</type>", b"<type>compute</type>"), "type is not"),
    (lambda x: x.replace(b"<used_memory>6358 MiB</used_memory>", b"<used_memory>6 GiB</used_memory>"), "MiB"),
    (lambda x: x.replace(b"<attached_gpus>1</attached_gpus>", b"<attached_gpus>0</attached_gpus>"), "attached_gpus"),
    (lambda x: x.replace(b"<nvidia_smi_log>", b"<log>").replace(b"</nvidia_smi_log>", b"</log>"), "root element"),
    (lambda x: x.replace(b'SYSTEM "nvsmi_device_v13.dtd">', b'[<!ENTITY a "b">]>'), "entity"),
    (lambda x: b"x" * 9_000_000, "too large"),
    (lambda x: x.decode().replace("NVIDIA H200", "\udc80"), "not encodable"),   # a lone surrogate in a str
])
def test_bad_xml_is_a_parse_error(mutate, reason) -> None:
    out = parse_query_xml(mutate(VK["xml"]))
    assert isinstance(out, ParseError) and reason in str(out), out


def test_unreadable_process_fields_are_unknown_not_zero() -> None:
    x = VK["xml"].replace(b"<used_memory>6358 MiB</used_memory>", b"<used_memory>N/A</used_memory>")
    (p,) = parse_query_xml(x).gpus[0].processes
    assert p.used_mb is None
    na = VK["xml"].split(b"<processes>")[0] + b"<processes>N/A</processes>" + VK["xml"].split(b"</processes>")[1]
    assert parse_query_xml(na).gpus[0].processes is None          # cannot list: unknown, not "none"
    assert smi_rows(parse_query_xml(na)) is None


# ------------------------------------------------------------------------------ union, never a sum

def test_nvml_lists_of_a_vulkan_process_unite_into_one_row() -> None:
    rows = nvml_rows(0, *nvml_lists(VK))
    assert rows == (GpuProc(0, VULKAN_PID, "C+G", 6358),)
    assert per_pid(rows) == {VULKAN_PID: 6358}                    # not 12716: no double count


def test_nvml_and_xml_give_the_same_rows() -> None:
    for c in (VK, GL, BOTH):
        assert nvml_rows(0, *nvml_lists(c)) == smi_rows(parse_query_xml(c["xml"]))
    assert per_pid(nvml_rows(0, *nvml_lists(GL))) == {GL_PID: 2055, CUDA_PID: 1634}


def test_a_process_never_exceeds_what_its_gpu_holds() -> None:
    """The union can be checked against the GPU: a summed C+G process would exceed the GPU's used."""
    for c in (VK, GL, BOTH):
        (gpu,) = parse_query_gpu(c["gpu"])
        assert sum(v for v in per_pid(nvml_rows(0, *nvml_lists(c))).values()) <= gpu.used_mb


def test_merge_rules() -> None:
    c, g = GpuProc(0, 9, "C", 100), GpuProc(0, 9, "G", 100)
    assert merge_procs([g, c]) == (GpuProc(0, 9, "C+G", 100),)
    assert merge_procs([GpuProc(0, 9, "C", None), g]) == (GpuProc(0, 9, "C+G", 100),)   # a number over unknown
    assert merge_procs([GpuProc(0, 9, "M+C", 5), GpuProc(0, 9, "G", 5)]) == (GpuProc(0, 9, "M+C+G", 5),)
    # Two GPUs, or two MIG instances, are two allocations: kept apart, and added per pid.
    two = merge_procs([GpuProc(0, 9, "C+G", 100), GpuProc(1, 9, "C", 50), GpuProc(0, 9, "C", 7, (1, 0))])
    assert len(two) == 3 and per_pid(two) == {9: 157}
    assert per_pid([GpuProc(0, 9, "C", 100), GpuProc(1, 9, "C", None)]) == {9: None}


# ------------------------------------------------------------------------------ read_vram on both paths

class ReplayHost(Host):
    """A host whose nvidia-smi answers with a recorded stdout per argv (the real tool's bytes)."""
    name, os, is_local = "h200", "linux", False

    def __init__(self, answers: dict[tuple[str, ...], str | bytes]) -> None:
        self.answers = answers
        self.runs: list[tuple[str, ...]] = []

    async def run(self, argv, timeout, env=None, cwd=None) -> Result:
        argv = tuple(argv)
        self.runs.append(argv)
        out = self.answers.get(argv)
        if out is None:
            return Result(argv, 2, stdout="Invalid combination of input arguments.")
        return Result(argv, 0, stdout=out.decode() if isinstance(out, bytes) else out)

    async def spawn_detached(self, argv, *, env=None, cwd=None, log_path=None, timeout=15.0) -> int:
        raise SpawnError("a replayed host starts nothing")


class RecordedNvml:
    """The pynvml calls _nvml_read makes, answered from a recorded nvml.json (driver 580's own numbers)."""
    NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED = 13, 3
    nvmlMemory_v2 = object()

    class NVMLError(Exception):
        value = 999

    def __init__(self, rec: dict) -> None:
        self.rec = rec

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return len(self.rec["gpus"])
    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict: return self.rec["gpus"][i]
    def nvmlDeviceGetName(self, h: dict) -> str: return h["name"]

    def nvmlDeviceGetUUID(self, h: dict) -> str:
        if "uuid" not in h:   # not in the recordings: the reading must stand without it
            raise self.NVMLError("uuid not recorded")
        return h["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h: dict, version=None) -> SimpleNamespace:
        return SimpleNamespace(**(h["v2"] if version is self.nvmlMemory_v2 else h["v1"]))

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict) -> list:
        return [SimpleNamespace(**p) for p in h["compute"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: dict) -> list:
        return [SimpleNamespace(**p) for p in h["graphics"]]


def _both(c: dict, monkeypatch) -> tuple[vram.VramReading, vram.VramReading, ReplayHost]:
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml(c["nvml"]))
    host = ReplayHost({("nvidia-smi", *QUERY_GPU_ARGS): c["gpu"], ("nvidia-smi", *QUERY_XML_ARGS): c["xml"]})

    async def go():
        return (await read_vram(HostConfig("h200", "local", vram_source="nvml"), host),
                await read_vram(HostConfig("h200", "ssh", vram_source="nvidia-smi"), host))
    nv, smi = asyncio.run(go())
    return nv, smi, host


@pytest.mark.parametrize("name", CASES)
def test_read_vram_same_processes_from_both_paths(name, monkeypatch) -> None:
    c = case(name)
    nv, smi, host = _both(c, monkeypatch)
    assert nv.ok and smi.ok, (nv.evidence.line(), smi.evidence.line())
    assert nv.procs == smi.procs and nv.apps == smi.apps and nv.apps_error is smi.apps_error is None
    # One call for the GPUs and their processes: `-q -x` only (the guards' view is the same reading).
    assert host.runs == [("nvidia-smi", *QUERY_XML_ARGS)]
    assert smi.gpus[0].uuid and smi.gpus[0].uuid.startswith("GPU-") \
        and nv.gpus[0].uuid in (None, smi.gpus[0].uuid)   # one recording has no uuid


def test_read_vram_counts_the_vulkan_server_once(monkeypatch) -> None:
    nv, smi, _ = _both(VK, monkeypatch)
    for r in (nv, smi):
        assert r.apps == {VULKAN_PID: 6358}
        assert [(p.pid, p.type) for p in r.procs] == [(VULKAN_PID, "C+G")]


def test_read_vram_sees_the_graphics_only_process(monkeypatch) -> None:
    nv, smi, _ = _both(GL, monkeypatch)
    for r in (nv, smi):
        assert r.apps == {GL_PID: 2055, CUDA_PID: 1634}
        assert {p.pid: p.type for p in r.procs} == {GL_PID: "G", CUDA_PID: "C"}
    nv, smi, _ = _both(BOTH, monkeypatch)
    for r in (nv, smi):
        assert r.apps == {BOTH_VK: 6358, BOTH_GL: 2055}


def test_smi_path_failure_is_unknown_with_the_error(monkeypatch) -> None:
    host = ReplayHost({("nvidia-smi", *QUERY_GPU_ARGS): VK["gpu"]})     # -q -x answers exit 2
    r = asyncio.run(read_vram(HostConfig("h200", "ssh", vram_source="nvidia-smi"), host))
    assert not r.ok and r.gpus == () and r.apps is None and "exit 2" in (r.evidence.error or "")


def test_smi_path_one_call_names_each_gpu_by_its_uuid(monkeypatch) -> None:
    host = ReplayHost({("nvidia-smi", *QUERY_XML_ARGS): VK["xml"]})
    r = asyncio.run(read_vram(HostConfig("h200", "ssh", vram_source="nvidia-smi"), host))
    assert r.ok and host.runs == [("nvidia-smi", *QUERY_XML_ARGS)]
    assert r.gpus[0].name == "NVIDIA H200" and r.gpus[0].uuid.startswith("GPU-") and r.gpus[0].used_mb == 6381


def test_nvml_process_list_error_is_unknown_per_process(monkeypatch) -> None:
    nvml = RecordedNvml(VK["nvml"])

    def broken(h):
        raise RecordedNvml.NVMLError("Not Supported")
    nvml.nvmlDeviceGetGraphicsRunningProcesses = broken
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    r = asyncio.run(read_vram(HostConfig("h200", "local", vram_source="nvml"), ReplayHost({})))
    assert r.ok and r.gpus[0].used_mb == 6380 and r.apps is None and "Not Supported" in r.apps_error
