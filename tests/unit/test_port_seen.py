"""A served side's display beat shows its server's accepted port check again instead of connecting (PortSeen):
only for the same server process, only on a display's beat of a side being served, only for a while; a
plan's or a check's poll, an RPC probe, another process or a side no longer served connects. No sockets
here: the host's port check is counted."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from ops.platform.procs import Proc, ProcTable
from ops.platform.types import TcpCheck
from ops.probes.prober import Prober
from ops.probes.server import PortSeen, ServerProbe, probe_server
from ops.tristate import Evidence, State, Verdict
from tests.tui.fakes import rig_config


class CountingPlatform:
    def __init__(self) -> None:
        self.connects = 0

    async def port_check(self, port: int, timeout: float) -> TcpCheck:
        self.connects += 1
        return TcpCheck(True, Evidence(f"tcp connect gpu1:{port}", True, detail="accepted", took_ms=0.4))


def server_table(pid: int, create_time: float) -> ProcTable:
    cmd = ("/opt/carla/CarlaUE4.sh", "-RenderOffScreen", "-carla-rpc-port=2000")
    return ProcTable("gpu1", {pid: Proc(pid, 1, create_time, cmd, name="CarlaUE4.sh", state="S")})


def test_the_same_server_process_shows_the_accepted_connect_again_with_its_age() -> None:
    rig = rig_config()
    side = rig.sides["A"]
    platform = CountingPlatform()
    host = SimpleNamespace(name="gpu1", is_local=False, platform=platform)
    hosts = {side.server.host: host}

    async def probe(table: ProcTable, seen: PortSeen | None) -> ServerProbe:
        return await probe_server(rig, side, hosts, with_rpc=False, table=table, port_seen=seen)   # type: ignore[arg-type]

    first = asyncio.run(probe(server_table(4242, 1000.0), None))
    assert platform.connects == 1 and first.tcp is not None and first.tcp.open is True
    seen = PortSeen(4242, 1000.0, first.tcp, time.time() - 12)
    again = asyncio.run(probe(server_table(4242, 1000.0), seen))
    assert platform.connects == 1, "the same process: no connect"
    assert again.port_open is True and again.verdict.summary.startswith("process and port up")
    tcp_ev = [e for e in again.verdict.evidence if e.what.startswith("tcp connect")]
    assert tcp_ev and "12 s ago" in tcp_ev[0].detail, tcp_ev
    other = asyncio.run(probe(server_table(4243, 1001.0), seen))   # another server process on the port
    assert platform.connects == 2 and other.pid == 4243
    gone = asyncio.run(probe(ProcTable("gpu1", {}), seen))         # no server: a refusal must be measured
    assert platform.connects == 3 and gone.pid is None


def answer(pid: int, open_: bool | None = True) -> ServerProbe:
    tcp = TcpCheck(open_, Evidence("tcp connect gpu1:2000", open_ is not None, detail="accepted"))
    return ServerProbe(Verdict(State.UNKNOWN, (), "process and port up; rpc not checked yet"), pid, 1000.0,
                       port_open=open_, tcp=tcp)


def test_only_a_display_beat_of_a_served_side_takes_the_seen_connect() -> None:
    p = Prober(rig_config(), {})
    p._keep_connect("A", answer(7), None)
    assert p._port_seen("A", 1.5, rpc_due=False) is None          # not served (yet): connect
    p._served["A"] = True
    seen = p._port_seen("A", 1.5, rpc_due=False)
    assert seen is not None and seen.pid == 7
    assert p._port_seen("A", 0.0, rpc_due=False) is None          # a plan's or a check's poll measures now
    assert p._port_seen("A", 1.5, rpc_due=True) is None           # an RPC probe connects anyway
    p._keep_connect("A", answer(7), seen)                             # shown again: its age runs on
    assert p._ports["A"] is seen
    p.port_served_s = 0.0                                          # older than the window: connect
    assert p._port_seen("A", 1.5, rpc_due=False) is None
    p.port_served_s = 60.0
    p._keep_connect("A", answer(7, open_=None), None)                 # a connect that could not tell: forgotten
    assert p._port_seen("A", 1.5, rpc_due=False) is None
    p._served["A"] = False
    p._keep_connect("A", answer(8), None)
    assert p._port_seen("A", 1.5, rpc_due=False) is None          # the side stopped being served
