"""The resource guards' arithmetic and parsers, and the preflight's decisions, without processes (issue 21)."""
from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from ops.config import parse_config
from ops.parse.sysinfo import parse_df, parse_meminfo, parse_windows_memory
from ops.probes import preflight as pf
from ops.probes.gpuview import GpuApp, GpuRow, GpuView, gpu_view
from ops.probes.resources import (
    Level,
    SidePids,
    budget_fit,
    disk_level,
    foreign_load,
    read_memory,
)
from ops.probes.vram import Gpu, GpuProc, VramReading
from ops.tristate import Evidence
from sim.winhost import FakeWindowsHost

RIG = """
version: 1
hosts: {{local: {{type: local}}, win: {{type: wsl-interop, os: windows}}}}
resources: {{disk_warning_mb: 100, disk_critical_mb: 10}}
sides:
  A:
    {budget_a}
    server: {{host: local, command: [x], rpc_port: 2000}}
    evaluator: {{host: local, conda_env: e, cwd: /w/A, script: s.py, routes: r.xml, checkpoint: c.json, log: l.log,
                tm_port: 8000, args: {{agent: agent.py{debug}}}{flags}}}
  B:
    {budget_b}
    server: {{host: local, command: [x], rpc_port: 3000}}
    evaluator: {{host: local, conda_env: e, cwd: /w/B, script: s.py, routes: r.xml, checkpoint: c.json, log: l.log,
                tm_port: 9000, args: {{agent: agent.py}}}}
"""


def rig(budget_a: int | None = None, budget_b: int | None = None, debug: str = "", flags: str = ""):
    return parse_config(RIG.format(budget_a=f"vram_budget_mb: {budget_a}" if budget_a else "",
                                   budget_b=f"vram_budget_mb: {budget_b}" if budget_b else "",
                                   debug=debug, flags=flags))


U0, U1 = "GPU-aaaa", "GPU-bbbb"


def view(apps: list[tuple[int, str, int | None]] | None, used: int | None = 20000, total: int | None = 32768,
         gpus: int = 1) -> GpuView:
    rows = (GpuRow(0, U0, "RTX 5090", used, total),) + ((GpuRow(1, U1, "RTX 5090", 0, total),) if gpus == 2 else ())
    return GpuView("local", rows, None if apps is None else tuple(GpuApp(p, u, m) for p, u, m in apps),
                   Evidence("nvidia-smi", True))


def pids(a_server=(), a_model=(), b_server=(), b_model=()) -> dict[str, SidePids]:
    return {"A": SidePids("A", "local", frozenset(a_server), frozenset(a_model)),
            "B": SidePids("B", "local", frozenset(b_server), frozenset(b_model))}


def test_the_field_notes_second_automot_side_does_not_fit_on_a_32_gb_card() -> None:
    # Side B runs (server 6 GB + model 13.5 GB = its 19.5 GB budget); A's server is up, its model not yet.
    r = rig(budget_a=19500, budget_b=19500)
    v = view([(10, U0, 6000), (20, U0, 6000), (21, U0, 13500)], used=25500)
    fit = budget_fit(r, "A", v, pids(a_server=[10], b_server=[20], b_model=[21]))
    assert fit.fits is False and fit.need_mb == 13500 and fit.available_mb == 7268
    assert "side A needs 13500 MiB more (vram_budget_mb 19500, holds 6000) on gpu0 RTX 5090: 7268 MiB free" in fit.detail


def test_another_sides_budget_is_reserved_not_just_what_it_holds_now() -> None:
    r = rig(budget_a=10000, budget_b=20000)
    v = view([(20, U0, 6000)], used=6000)          # B's server only: its model will take 14000 more
    fit = budget_fit(r, "A", v, pids(b_server=[20]))
    assert fit.reserved == {"B": 14000} and fit.available_mb == 32768 - 6000 - 14000 and fit.fits is True
    assert budget_fit(rig(budget_a=13000, budget_b=20000), "A", v, pids(b_server=[20])).fits is False


def test_budget_unknowns_are_unknown_never_a_fit() -> None:
    r = rig(budget_a=10000)
    assert budget_fit(r, "A", view(None), pids()).fits is None                       # no process list
    assert budget_fit(r, "A", view([], used=None), pids()).fits is None              # [N/A] memory
    assert budget_fit(r, "A", view([(10, U0, None)]), pids(a_server=[10])).fits is None
    two = budget_fit(r, "A", view([], gpus=2), pids())
    assert two.fits is None and "which GPU it will use is unknown" in two.detail
    assert budget_fit(rig(), "A", view([]), pids()).fits is True                      # no budget: nothing to fit


def test_foreign_load_is_what_belongs_to_no_side() -> None:
    v = view([(10, U0, 6000), (11, U0, 500), (99, U0, 30000), (98, U1, 100)], gpus=2)
    got = foreign_load(v, pids(a_server=[10], a_model=[11]).values(), None)
    assert [(f.pid, f.gpu, f.used_mb) for f in got or []] == [(99, 0, 30000), (98, 1, 100)]
    assert foreign_load(view(None), pids().values(), None) is None


def test_the_guards_view_is_the_vram_reading_graphics_only_processes_included() -> None:
    """One reading serves the VRAM pane and the guards: every process type (a G-only one is someone's
    load too), a C+G process once, a GPU without a uuid matched by nothing, a failed reading unreadable."""
    ok = Evidence("nvidia-smi on local", True)
    procs = (GpuProc(0, 10, "C+G", 6000), GpuProc(0, 77, "G", 300), GpuProc(1, 426, "C", None))
    r = VramReading((Gpu(0, "NVIDIA H200", 12000, 143771, "GPU-aaaa"), Gpu(1, "X", None, None, None)),
                    {10: 6000, 77: 300, 426: None}, ok, "nvidia-smi", procs)
    v = gpu_view("local", r)
    assert v.ok and v.gpus[0] == GpuRow(0, "GPU-aaaa", "NVIDIA H200", 12000, 143771)
    assert v.gpus[1].uuid.startswith("unknown-uuid") and v.by_uuid(None) is None
    assert v.apps == (GpuApp(10, "GPU-aaaa", 6000, "C+G"), GpuApp(77, "GPU-aaaa", 300, "G"),
                      GpuApp(426, v.gpus[1].uuid, None, "C"))
    assert v.gpu_of({77}) == v.gpus[0]
    assert gpu_view("local", dataclasses.replace(r, procs=None, apps=None, apps_error="N/A")).apps is None
    bad = gpu_view("local", VramReading((), None, Evidence("nvidia-smi on local", False, error="rc 9"), "nvidia-smi"))
    assert not bad.ok and bad.evidence.error == "rc 9" and bad.apps is None


def test_parsers() -> None:
    assert parse_meminfo("MemTotal: 2048000 kB\nMemFree: 1 kB\nMemAvailable: 1024000 kB\n") == (1000, 2000)
    assert isinstance(parse_meminfo("MemTotal: 1 kB\n"), str)
    assert parse_windows_memory('{"FreePhysicalMemory":5767168,"TotalVisibleMemorySize":33554432}') == (5632, 32768)
    assert isinstance(parse_windows_memory("null"), str)
    df = "Filesystem 1024-blocks Used Available Capacity Mounted on\ntmpfs 24576 20480 4096 84% /mnt/x y\n"
    assert parse_df(df) == {"0": ("/mnt/x y", 4, 24)}
    assert [disk_level(v, 100, 10) for v in (None, 5, 50, 500)] == [Level.UNKNOWN, Level.CRITICAL, Level.WARNING,
                                                                   Level.OK]


def test_windows_host_memory_through_powershell_against_its_6_gb_floor() -> None:
    r = rig()
    host = FakeWindowsHost("win", processes_json=(Path(__file__).parents[1] / "data" / "winproc_ps51.json").read_text())
    m = asyncio.run(read_memory(r, "win", host, 5.0))
    assert (m.available_mb, m.total_mb, m.floor_mb, m.level) == (5632, 32768, 6144, Level.WARNING)
    assert "Win32_OperatingSystem" in host.scripts[-1]


def test_config_keys_and_their_errors() -> None:
    r = rig(budget_a=19500, flags=", debug_run: true, share_server_gpu: true", debug=", debug: 1")
    sc = r.side("A")
    assert sc.vram_budget_mb == 19500 and sc.evaluator.debug_run and sc.evaluator.share_server_gpu
    assert sc.debug_level == 1 and r.resources.disk_critical_mb == 10
    assert any("DEBUGGING run" in w for w in r.warnings)
    try:
        parse_config(RIG.format(budget_a="vram_budget_mb: -1", budget_b="", debug="", flags="")
                     .replace("disk_critical_mb: 10", "disk_critical_mb: 1000"), "rig.yaml")
    except Exception as e:
        text = str(e)
    assert "rig.yaml:4: resources.disk_critical_mb: 1000 is above disk_warning_mb 100" in text
    assert "sides.A.vram_budget_mb: must be > 0, got -1" in text


def test_version_and_debug_decisions() -> None:
    sc = rig(debug=", debug: 2").side("A")
    assert pf.debug_check(sc).verdict is pf.Word.FAIL
    ok = {"ok": True, "client_version": "0.9.16"}
    assert pf.version_check({**ok, "server_version": "0.9.16"}, sc).verdict is pf.Word.PASS
    assert pf.version_check({**ok, "server_version": "0.9.15"}, sc).verdict is pf.Word.WARN
    assert pf.version_check({**ok, "server_version": "0.10.0"}, sc).verdict is pf.Word.FAIL
    assert pf.version_check({**ok, "server_error": "RuntimeError: time-out"}, sc).verdict is pf.Word.UNKNOWN
    # A stage the script never reached (it timed out there) is UNKNOWN with the reason, never a PASS.
    checks = pf.decide(sc, pf.parse_facts('noise\n{"stage": "python"}\n'), "timed out in stage 'carla'", None, "")
    assert {c.name: c.verdict for c in checks}["agent-import"] is pf.Word.UNKNOWN
    assert all("timed out in stage 'carla'" in c.summary for c in checks if c.verdict is pf.Word.UNKNOWN)
