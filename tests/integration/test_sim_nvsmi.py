"""The sim's fake nvidia-smi knows process types (C, G, C+G) and `-q -x`, and agrees with the real tool.

"Agrees" is checked against the recorded H200 outputs (tests/data/nvsmi_vulkan): for the same processes the
fake's --query-compute-apps is the real bytes, its `-q -x` reads back to the same processes as the real one,
the elements the console reads sit in the real log's order, and `-d` with `-x` is refused in the real
words. Then a sim rig end to end: its rendering server is C+G, read once through the nvidia-smi path.
"""
from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ops.model import HostConfig
from ops.parse import parse_query_xml
from ops.platform.local import LocalHost
from ops.probes.vram import read_vram
from sim import fake_nvsmi, rig
from sim.layout import SimLayout
from sim.ledger import VULKAN, GpuSpec, LedgerEntry, load_model

DATA = Path(__file__).resolve().parents[1] / "data" / "nvsmi_vulkan"
H200 = (GpuSpec(0, "NVIDIA H200", 143771, 0, "GPU-5f4dd1a4-085a-b3e1-1fbc-41608d751f41"),)   # the recorded card
NAME = "/opt/torch/.venv/bin/python3"
# The processes of the recorded moment h200_vulkan_cg_gl_g: a Vulkan one (C+G) and a GL one (G).
RECORDED = [LedgerEntry(675, None, 0, 6358, Path("675.json"), "C+G"),
            LedgerEntry(676, None, 0, 2055, Path("676.json"), "G")]


def fake(argv: list[str], entries: list[LedgerEntry] = RECORDED, na: bool = False) -> str:
    return fake_nvsmi.render(fake_nvsmi.parse_args(argv), H200, entries, na=na, name_of=lambda pid: NAME)


def test_compute_apps_leaves_graphics_only_out_as_the_real_one() -> None:
    out = fake(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    assert out == (DATA / "h200_vulkan_cg_gl_g.compute_apps.csv").read_text() == "675, 6358\n"
    c_only = [LedgerEntry(574, None, 0, 1634, Path("574.json"), "C"), LedgerEntry(573, None, 0, 2055, Path("573.json"), "G")]
    assert fake(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], c_only) == \
        (DATA / "h200_gl_g_cuda_c.compute_apps.csv").read_text()


def test_xml_reads_back_like_the_real_one() -> None:
    real = parse_query_xml((DATA / "h200_vulkan_cg_gl_g.q_x.xml").read_bytes())
    sim = parse_query_xml(fake(["-q", "-x"]))
    assert sim.driver_version == real.driver_version
    (rg,), (sg,) = real.gpus, sim.gpus
    assert (sg.index, sg.name, sg.uuid, sg.total_mb) == (rg.index, rg.name, rg.uuid, rg.total_mb)
    assert sg.processes == rg.processes                 # pid, type, used memory, name, MIG ids: all the same
    assert fake(["--query", "--xml-format"]) == fake(["-q", "-x"])


def _paths(root: ET.Element) -> list[str]:
    out: list[str] = []

    def walk(el: ET.Element, prefix: str) -> None:
        for child in el:
            p = f"{prefix}/{child.tag}"
            out.append(p)
            walk(child, p)
    walk(root, root.tag)
    return out


def test_the_fake_xml_is_the_real_layout_cut_down() -> None:
    """Every element of the fake's log is in the real log, in the same order (a subsequence of it)."""
    real = _paths(ET.fromstring((DATA / "h200_vulkan_cg_gl_g.q_x.xml").read_bytes()))
    sim = _paths(ET.fromstring(fake(["-q", "-x"])))
    it = iter(real)
    missing = [p for p in sim if not any(p == r for r in it)]
    assert missing == [], missing
    head = fake(["-q", "-x"]).splitlines()[:3]
    assert head == (DATA / "h200_vulkan_cg_gl_g.q_x.xml").read_text().splitlines()[:3]


def test_an_idle_gpu_and_unreadable_memory() -> None:
    (g,) = parse_query_xml(fake(["-q", "-x"], [])).gpus
    assert g.processes == () and g.used_mb == 0
    (g,) = parse_query_xml(fake(["-q", "-x"], na=True)).gpus
    assert g.used_mb is None and [p.used_mb for p in g.processes] == [None, None]   # N/A: unknown, never 0


def test_display_with_xml_is_refused_in_the_real_words(tmp_path, capsys) -> None:
    assert fake_nvsmi.main(["-q", "-x", "-d", "PIDS"], tmp_path) == 2
    assert capsys.readouterr().out == (DATA / "h200_q_x_with_d.refused.txt").read_text()


def test_ledger_types_from_the_gpu_model(tmp_path) -> None:
    layout = SimLayout.of(tmp_path)
    assert load_model(layout).adapter(0).proc_type == VULKAN == "C+G"
    layout.gpus_json.parent.mkdir(parents=True, exist_ok=True)
    layout.gpus_json.write_text('{"gpus": [{"index": 0, "name": "NVIDIA H200", "total_mb": 143771}],'
                                ' "adapters": {"0": {"behaviour": "render", "gpu": 0, "type": "G"},'
                                ' "1": {"behaviour": "render", "gpu": 0, "type": "X"}}}')
    with pytest.raises(ValueError, match="unknown process type 'X'"):
        load_model(layout)


@pytest.mark.timeout(120)
def test_a_sim_server_is_one_c_plus_g_process_on_the_nvidia_smi_path(tmp_path) -> None:
    rig.up(tmp_path, start_evaluators=False, routes=3, route_s=0.3, tick_s=0.05, eval_timeout_s=2)
    try:
        layout = SimLayout.of(tmp_path)
        cfg = HostConfig("sim", "local", nvidia_smi=(str(layout.bin / "nvidia-smi"),), vram_source="nvidia-smi")

        async def settled():
            for _ in range(100):   # the servers book their VRAM a moment after start
                r = await read_vram(cfg, LocalHost("sim"), 10.0)
                # The GPU line and the process list are two reads: settled when both see both servers.
                if r.apps and len(r.apps) == 2 and r.gpus and r.gpus[0].used_mb == sum(r.apps.values()):
                    return r
                await asyncio.sleep(0.1)
            return r
        r = asyncio.run(settled())
        assert r.ok and r.apps is not None and len(r.apps) == 2, r
        assert set(r.apps.values()) == {6000} and {p.type for p in r.procs} == {"C+G"}
        assert r.gpus[0].used_mb == 12000 == sum(r.apps.values())
    finally:
        rig.down(tmp_path)
