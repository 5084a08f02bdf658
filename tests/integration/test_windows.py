"""The Windows command set (ops/platform/windows.py) against the fake Windows host's recorded outputs.

Nothing here runs on Windows: the fake answers from CONSTRUCTED PowerShell 5.1 / 7 outputs (tests/data,
see SOURCES.md) and records every script, so the tests check both the parsing and what would be sent.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ops.actions.audit import Audit
from ops.actions.guard import Confirmation, Guard, Op, Target, make_plan
from ops.model import HostConfig
from ops.platform import windows
from ops.platform.listeners import listeners
from ops.platform.verbs import clients_connected, process_table, signal_if_same
from ops.probes.ports import read_exclusions
from ops.probes.server import main_server, server_processes
from ops.probes.vram import read_vram
from sim.fake_nvsmi import XmlProc, render_xml
from sim.winhost import DEFAULT_XML_GPUS, FakeWindowsHost, nvsmi_xml

DATA = Path(__file__).resolve().parents[1] / "data"
PS51 = (DATA / "winproc_ps51.json").read_text(encoding="utf-8")
PS7 = (DATA / "winproc_ps7.json").read_text(encoding="utf-8")
SINGLE = (DATA / "winproc_ps51_single.json").read_text(encoding="utf-8")
NETSH_B = (DATA / "netsh_otel_pr10839_b.txt").read_text(encoding="utf-8")
LISTEN = (DATA / "win_nettcp_listen.json").read_text(encoding="utf-8")
ESTABLISHED = (DATA / "win_nettcp_established_2031.json").read_text(encoding="utf-8")
WIN_CFG = HostConfig(name="win", type="ssh", os="windows", address="10.0.0.1")


def run(coro):
    return asyncio.run(coro)


def fake(flavor: str = "ps51", text: str | None = None, **kw) -> FakeWindowsHost:
    return FakeWindowsHost("win", processes_json=text or (PS51 if flavor == "ps51" else PS7), flavor=flavor, **kw)


@pytest.mark.parametrize("flavor", ["ps51", "ps7"])
def test_process_listing_both_flavours(flavor: str) -> None:
    host = fake(flavor)
    table = run(process_table(host, 5.0))
    assert table.ok, table.error
    assert len(table.procs) == 13
    script = host.scripts[-1]
    assert "@(Get-CimInstance Win32_Process" in script and "-Depth 3" in script
    assert "Select-Object ProcessId,ParentProcessId,CommandLine,CreationDate" in script
    # Null CommandLine (other users' processes without elevation) is unreadable, not empty.
    assert table.procs[4].cmdline is None and table.procs[0].create_time == 0.0
    # Two CARLA launcher → shipping pairs, found by the exact port token; the server is the inner one.
    procs = server_processes(table, 2031)
    assert [p.pid for p in procs] == [7340, 7352]
    assert main_server(procs).pid == 7352
    assert procs[1].name == "CarlaUE4-Win64-Shipping.exe"
    assert procs[1].ppid == 7340


def test_ps51_and_ps7_agree() -> None:
    a = run(process_table(fake("ps51"), 5.0))
    b = run(process_table(fake("ps7"), 5.0))
    assert a.procs.keys() == b.procs.keys()
    for pid in a.procs:
        pa, pb = a.procs[pid], b.procs[pid]
        assert (pa.ppid, pa.cmdline) == (pb.ppid, pb.cmdline)
        assert abs(pa.create_time - pb.create_time) < 0.001, pid


def test_single_process_answer_is_still_a_table() -> None:
    table = run(process_table(fake(text=SINGLE), 5.0))
    assert table.ok and list(table.procs) == [7352]


def test_listing_timeout_is_an_error_not_empty() -> None:
    host = fake()
    host.timeout_next = 1
    table = run(process_table(host, 2.0))
    assert not table.ok and "timeout" in table.error


def test_stop_by_id_after_identity_check() -> None:
    host = fake()
    table = run(process_table(host, 5.0))
    server = table.procs[7352]
    out = run(signal_if_same(host, server.pid, server.create_time, "SIGTERM"))
    assert out.outcome == "sent" and host.stopped == [7352]
    script = host.scripts[-1]
    assert "Stop-Process -Id $id" in script and "-Name" not in script
    assert script.index("CreationDate") < script.index("Stop-Process")   # the re-check comes first
    assert 7352 not in run(process_table(host, 5.0)).procs
    # Gone now; a recycled pid (another start time) is never stopped.
    assert run(host.platform.signal_if_same(7352, server.create_time, "SIGKILL", 5.0)).outcome == "gone"
    other = table.procs[7340]
    changed = run(host.platform.signal_if_same(7340, other.create_time + 5, "SIGKILL", 5.0))
    assert changed.outcome == "changed" and 7340 in host.pids()


def test_guard_stops_a_windows_server_pair_outer_to_inner(tmp_path) -> None:
    host = fake("ps7")
    table = run(process_table(host, 5.0))
    targets = [Target.of("win", p, r) for p, r in zip(server_processes(table, 2031), ("launcher", "server"))]
    plan = make_plan(Op.STOP_OWN_LAUNCH, "A", "win", targets, {"launch": "OURS"})
    out = run(Guard({"win": host}, Audit(tmp_path), grace_s=1.0).execute(plan, Confirmation(True, "test")))
    assert out.ok, out.detail
    assert host.stopped == [7340, 7352]
    assert all("-Name" not in s for s in host.scripts)
    assert (tmp_path / "audit.jsonl").exists()
    # The other side's pair (another port) is untouched.
    left = run(process_table(host, 5.0))
    assert len(server_processes(left, 2031)) == 0 and len(server_processes(left, 2034)) == 2


def test_netsh_through_the_windows_host() -> None:
    host = fake(netsh_text=NETSH_B.replace("\n", "\r\n"))
    ex = run(read_exclusions(WIN_CFG, host, 5.0))
    assert ex.state == "READ"
    assert [(r.start, r.end, r.administered) for r in ex.ranges] == [
        (80, 80, False), (5986, 5986, False), (47001, 47001, False), (55679, 55679, True)]
    assert host.runs[-1] == ("netsh", "int", "ipv4", "show", "excludedportrange", "protocol=tcp")


def test_nvidia_smi_through_the_windows_host() -> None:
    # The server (C+G, as a Vulkan renderer is) and a graphics-only process (G): `-q -x` lists both, and
    # each counts once; one call reads the GPUs and their processes (no --query-gpu, no --query-compute-apps,
    # which would miss the G one).
    xml = nvsmi_xml([XmlProc(0, 7352, "C+G", 6144, "CarlaUE4-Win64-Shipping.exe"),
                     XmlProc(0, 4410, "G", 512, "dwm.exe")])
    host = fake(nvsmi_apps="7352, 6144\r\n", nvsmi_xml_text=xml)
    v = run(read_vram(WIN_CFG, host, 5.0))
    assert v.ok and v.source == "nvidia-smi"
    assert v.gpus[0].name == "NVIDIA GeForce RTX 4090" and v.gpus[0].used_mb == 1024 + 6144 + 512
    assert v.gpus[0].uuid == "GPU-4090" and v.gpus[1].name == "NVIDIA RTX A2000"
    assert v.apps == {7352: 6144, 4410: 512}
    assert {(p.pid, p.type) for p in v.procs} == {(7352, "C+G"), (4410, "G")}
    assert host.runs == [("nvidia-smi", "-q", "-x")]
    # WDDM: memory fields N/A are unknown, never 0.
    na = fake(nvsmi_xml_text=render_xml(DEFAULT_XML_GPUS, [XmlProc(0, 7352, "C+G", 6144, "x.exe")], na=True))
    w = run(read_vram(WIN_CFG, na, 5.0))
    assert w.ok and w.gpus[1].used_mb is None and w.gpus[0].total_mb is None and w.apps == {7352: None}


def test_nvidia_smi_xml_unreadable_is_unknown() -> None:
    """A garbled `-q -x` is an UNKNOWN reading with the parser's error: nothing half-trusted."""
    host = fake(nvsmi_xml_text="<nvidia_smi_log><gpu><processes>\r\n")
    v = run(read_vram(WIN_CFG, host, 5.0))
    assert not v.ok and v.gpus == () and v.apps is None
    assert "not well-formed" in (v.evidence.error or "") and "UNKNOWN" not in (v.evidence.detail or "")


def test_listening_ports_and_clients() -> None:
    host = fake(listen_json=LISTEN, established={2031: ESTABLISHED})
    lst = run(listeners(host, 5.0))
    assert lst.ok and lst.owners(2031) == frozenset({7352}) and lst.owners(135) == frozenset({1180})
    n, ev = run(clients_connected(host, 2031, 5.0))
    assert n == 1 and ev.ok
    assert "ObjectNotFound" in host.scripts[-1] and "-LocalPort 2031 -State Established" in host.scripts[-1]
    n, _ = run(clients_connected(host, 2041, 5.0))
    assert n == 0                                      # no rows: zero clients (ObjectNotFound handled)
    host.timeout_next = 1
    n, ev = run(clients_connected(host, 2031, 5.0))
    assert n is None and not ev.ok                     # unknown, never "no clients"


def test_spawn_detached_uses_wmi_and_the_launcher_child_is_found() -> None:
    host = fake()
    argv = ["C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4.exe", "-RenderOffScreen", "-carla-rpc-port=2051",
            "-graphicsadapter=0"]
    pid = run(host.spawn_detached(argv))
    script = host.spawn_scripts[-1]
    assert "Win32_Process" in script and "Create" in script and "Start-Process" not in script
    table = run(process_table(host, 5.0))
    procs = server_processes(table, 2051)
    assert procs[0].pid == pid and main_server(procs).ppid == pid
    assert procs[0].cmdline == tuple(argv)


def test_scripts_are_built_from_numbers_only() -> None:
    s = windows.stop_script(1234, 1715671862.187)
    assert "$id = 1234" in s and "$expected = 1715671862187" in s
    with pytest.raises((TypeError, ValueError)):
        windows.stop_script("1234; Stop-Process -Name CarlaUE4", 1.0)  # type: ignore[arg-type]
    assert json.loads(ESTABLISHED)


def test_port_scan_of_a_windows_server_host(tmp_path) -> None:
    """The whole `ports` path with the server on Windows: netsh, Get-NetTCPConnection and Win32_Process."""
    from types import SimpleNamespace

    from ops.model import EvaluatorConfig, RigConfig, ServerConfig, SideConfig
    from ops.platform.local import LocalHost
    from ops.probes.ports import scan_ports
    from ops.probes.prober import Prober

    def side(name: str, n: int, tm: int) -> SideConfig:
        return SideConfig(name, ServerConfig(host="win", command=("C:\\CARLA\\CarlaUE4.exe",), rpc_port=n),
                          EvaluatorConfig(host="wsl", conda_env="e", cwd=str(tmp_path), script="s", routes="r",
                                          checkpoint="c", log="l", tm_port=tm))

    netsh = NETSH_B.replace("     47001       47001      ", "      2035        2134      ")
    host = fake(listen_json=LISTEN, netsh_text=netsh)
    rig = RigConfig(path=str(tmp_path / "rig.yaml"), name="t", state_dir=str(tmp_path), conda=("conda",), poll_s=1.0,
                    hosts={"win": WIN_CFG, "wsl": HostConfig(name="wsl", type="local")},
                    sides={"A": side("A", 2031, 8010), "B": side("B", 2034, 8020)})
    hosts = {"win": host, "wsl": LocalHost("wsl")}
    live = SimpleNamespace(config=rig, hosts=hosts, prober=Prober(rig, hosts))
    scan = run(scan_ports(live))
    a, b = scan.sides["A"], scan.sides["B"]
    assert a.verdict == "CLEAR"                  # 2031-2033 are held by A's own server (pid 7352)
    assert b.verdict == "CONFLICT"
    assert [(c.port, c.reason) for c in b.conflicts] == [(2035, "inside reserved range [2035, 2134] on win"),
                                                         (2036, "inside reserved range [2035, 2134] on win")]
    assert b.suggestion is not None and not ({2031, 2032, 2033, 8010} & set(b.suggestion))
    assert scan.hosts["wsl"].state == "NONE" and scan.hosts["win"].state == "READ"
    assert any("Get-NetTCPConnection -State Listen" in s for s in host.scripts)
    assert ("netsh", "int", "ipv4", "show", "excludedportrange", "protocol=tcp") in host.runs
