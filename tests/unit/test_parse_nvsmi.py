"""tests/support/nvsmi_csv: nvidia-smi CSV as the tests read it (the sim's fake and the fixtures), from the
real H200 captures and the placeholder values. The console itself reads `-q -x` (test_vram_vulkan.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ops.parse import ParseError
from tests.support.nvsmi_csv import (
    QUERY_APPS_ARGS,
    QUERY_GPU_ARGS,
    AppReading,
    GpuReading,
    parse_compute_apps,
    parse_query_gpu,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def captured() -> list[tuple[str, str]]:
    """(command, output) pairs of nvidia_smi_sample_h200.txt: `$ ` starts a command, `$` ends a line."""
    pairs: list[tuple[str, list[str]]] = []
    for line in (DATA / "nvidia_smi_sample_h200.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:].split("#")[0].strip(), []))
        elif pairs and line.endswith("$"):
            pairs[-1][1].append(line[:-1])
    return [(cmd, "".join(out_line + "\n" for out_line in out)) for cmd, out in pairs]


SAMPLES = captured()
H200 = (GpuReading(index=0, name="NVIDIA H200", used_mb=0, total_mb=143771),)


def test_the_fixture_holds_the_seven_captures() -> None:
    assert len(SAMPLES) == 7
    assert SAMPLES[0] == ("nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits",
                          "0, NVIDIA H200, 0, 143771\n")
    assert SAMPLES[3][1] == ""  # the no-process case prints nothing at all


def test_argv_constants_are_the_documented_ones() -> None:
    assert QUERY_GPU_ARGS == ("--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits")
    assert QUERY_APPS_ARGS == ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert f"nvidia-smi {' '.join(QUERY_GPU_ARGS)}" == SAMPLES[0][0]
    assert f"nvidia-smi {' '.join(QUERY_APPS_ARGS)}" == SAMPLES[5][0]


@pytest.mark.parametrize("i", [0, 1])
def test_real_query_gpu_with_and_without_header_and_units(i: int) -> None:
    cmd, out = SAMPLES[i]
    assert "--query-gpu" in cmd
    assert parse_query_gpu(out) == H200


@pytest.mark.parametrize("i, expected", [
    (2, ()),                                                     # header only: no process
    (3, ()),                                                     # nothing at all: no process
    (4, (AppReading(pid=426, used_mb=1542),)),                   # header + units
    (5, (AppReading(pid=426, used_mb=1542),)),                   # noheader,nounits
    (6, (AppReading(pid=426, used_mb=1542, process_name="python3"),)),
])
def test_real_compute_apps(i: int, expected: tuple[AppReading, ...]) -> None:
    cmd, out = SAMPLES[i]
    assert "--query-compute-apps" in cmd
    assert parse_compute_apps(out) == expected


@pytest.mark.parametrize("field", ["[N/A]", "[Not Supported]", "N/A", "[Unknown Error]",
                                   "[Insufficient Permissions]", "[GPU is lost]", "[n/a]"])
def test_placeholders_are_unknown_never_zero(field: str) -> None:
    gpus = parse_query_gpu(f"0, NVIDIA GeForce RTX 4090, {field}, {field}\r\n1, Microsoft Basic Render Driver, 0, 0\r\n")
    assert gpus == (GpuReading(0, "NVIDIA GeForce RTX 4090", None, None),
                    GpuReading(1, "Microsoft Basic Render Driver", 0, 0))
    apps = parse_compute_apps(f"7352, {field}\n8133, 6120\n")
    assert apps == (AppReading(7352, None), AppReading(8133, 6120))


def test_placeholder_with_a_unit_is_still_unknown() -> None:
    assert parse_query_gpu("0, NVIDIA H200, [N/A] MiB, 143771 MiB\n") == (GpuReading(0, "NVIDIA H200", None, 143771),)


def test_multi_gpu_windows_style_output() -> None:
    text = ("index, name, memory.used [MiB], memory.total [MiB]\r\n"
            "0, NVIDIA GeForce RTX 4090, 9120 MiB, 24564 MiB\r\n"
            "1, NVIDIA RTX A6000, [N/A], 49140 MiB\r\n")
    assert parse_query_gpu(text) == (GpuReading(0, "NVIDIA GeForce RTX 4090", 9120, 24564),
                                     GpuReading(1, "NVIDIA RTX A6000", None, 49140))


def test_a_name_with_commas_does_not_shift_the_memory_columns() -> None:
    assert parse_query_gpu("3, Weird, GPU, Name, 100, 200\n") == (GpuReading(3, "Weird, GPU, Name", 100, 200),)
    apps = parse_compute_apps(r"9244, C:\Tools\a,b\x.exe, 512" + "\n")
    assert apps == (AppReading(9244, 512, r"C:\Tools\a,b\x.exe"),)


def test_windows_wddm_compute_apps() -> None:
    # Under WDDM nvidia-smi cannot attribute memory to a process.
    text = ("pid, process_name, used_gpu_memory [MiB]\r\n"
            "7352, C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4\\Binaries\\Win64\\CarlaUE4-Win64-Shipping.exe, [N/A]\r\n")
    assert parse_compute_apps(text) == (
        AppReading(7352, None, "C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4\\Binaries\\Win64\\CarlaUE4-Win64-Shipping.exe"),)


@pytest.mark.parametrize("text, why", [
    ("", "no GPU line"),
    ("\n\n", "no GPU line"),
    ("index, name, memory.used [MiB], memory.total [MiB]\n", "no GPU line"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "expected 4 fields"),
    ("No devices were found\n", "expected 4 fields"),
    ("0, NVIDIA H200, 0\n", "expected 4 fields"),
    ("0, NVIDIA H200, 0, 143771\n0, NVIDIA H200, 0, 143771\n", "twice"),
    ("0, NVIDIA H200, 12 GiB, 140 GiB\n", "not a MiB count"),
    ("0, NVIDIA H200, -1, 143771\n", "not a MiB count"),
    ("0, NVIDIA H200, 1.5, 143771\n", "not a MiB count"),
    ("x, NVIDIA H200, 0, 143771\n", "index"),
    ("-1, NVIDIA H200, 0, 143771\n", "index"),
    ("0, , 0, 143771\n", "empty GPU name"),
    ("0, NVIDIA H200, 0, 143771\nindex, name, memory.used, memory.total\n", "header"),
    ("0, NVIDIA H200, 0, 1437", None),  # truncated mid-number: still a number, so accepted (below)
])
def test_query_gpu_failures(text: str, why: str | None) -> None:
    result = parse_query_gpu(text)
    if why is None:
        # A cut line cannot be told from a real one by syntax; the caller bounds the command instead.
        assert result == (GpuReading(0, "NVIDIA H200", 0, 1437),)
        return
    assert isinstance(result, ParseError), result
    assert why in result.reason
    assert result.what == "nvidia-smi query-gpu"


@pytest.mark.parametrize("text, why", [
    ("426\n", "1 field"),
    ("426, \n", "not a MiB count"),
    ("pid, 1542\n", "pid is not"),
    ("abc, 1542\n", "pid"),
    ("426, 1542\npid, used_gpu_memory [MiB]\n", "header"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "1 field"),
])
def test_compute_apps_failures(text: str, why: str) -> None:
    result = parse_compute_apps(text)
    assert isinstance(result, ParseError), result
    assert why in result.reason


def test_bytes_bom_and_oversize() -> None:
    assert parse_query_gpu(b"\xef\xbb\xbf0, NVIDIA H200, 0, 143771\r\n") == H200
    assert isinstance(parse_query_gpu("0, x, 1, 2\n" * 200_000), ParseError)
    assert isinstance(parse_compute_apps(None), ParseError)  # type: ignore[arg-type]
