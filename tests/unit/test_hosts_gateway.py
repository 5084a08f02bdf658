"""@gateway resolution: `ip route show` and /proc/net/route parsing, and the factory's use of it."""
from __future__ import annotations

import asyncio
import sys

import pytest

from ops.model import HostConfig
from ops.platform.factory import UnavailableHost, make_host, make_hosts
from ops.platform.gateway import GatewayError, parse_ip_route, parse_proc_net_route, resolve_gateway
from ops.platform.local import LocalHost
from ops.platform.ssh import SshHost
from ops.platform.wsl import WslInteropHost

IP_ROUTE = [
    # WSL2, the classic shape
    ("default via 172.29.96.1 dev eth0 proto kernel \n172.29.96.0/20 dev eth0 proto kernel scope link src "
     "172.29.104.7 \n", "172.29.96.1"),
    # two defaults: the lowest metric wins, whatever the order
    ("default via 10.0.0.1 dev wlan0 proto dhcp metric 600 \ndefault via 192.168.1.1 dev eth0 proto dhcp "
     "metric 100 \n", "192.168.1.1"),
    # a default without a gateway (VPN) is skipped
    ("default dev wg0 scope link \ndefault via 172.20.0.1 dev eth0 \n", "172.20.0.1"),
    # linkdown routes are skipped
    ("default via 10.1.1.1 dev eth1 linkdown \ndefault via 10.2.2.2 dev eth0 metric 5\n", "10.2.2.2"),
    # IPv6 shape (`ip -6 route`)
    ("default via fe80::1 dev eth0 proto ra metric 1024 expires 1799sec pref medium\n", "fe80::1"),
    ("172.29.96.0/20 dev eth0 proto kernel scope link src 172.29.104.7\n", None),
    ("", None),
    ("default via not-an-ip dev eth0\n", None),
    ("  \n\ngarbage line\n", None),
]


@pytest.mark.parametrize("text,expected", IP_ROUTE)
def test_parse_ip_route(text, expected):
    assert parse_ip_route(text) == expected


PROC_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


@pytest.mark.parametrize("rows,expected", [
    (["eth0\t00000000\t0160A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0",
      "eth0\t0060A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0"], "192.168.96.1"),
    (["eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0"], "192.0.2.1"),
    # not UP / no RTF_GATEWAY / lower metric wins
    (["eth0\t00000000\t0101A8C0\t0002\t0\t0\t0\t00000000\t0\t0\t0",
      "eth1\t00000000\t0102A8C0\t0001\t0\t0\t0\t00000000\t0\t0\t0",
      "eth2\t00000000\t0103A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0",
      "eth3\t00000000\t0104A8C0\t0003\t0\t0\t10\t00000000\t0\t0\t0"], "192.168.4.1"),
    ([], None),
    (["short line"], None),
])
def test_parse_proc_net_route(rows, expected):
    assert parse_proc_net_route(PROC_HEADER + "\n".join(rows) + "\n") == expected


def test_resolve_gateway_here():
    # This machine has a default route; whatever it is, both sources must agree.
    gw = asyncio.run(resolve_gateway())
    with open("/proc/net/route") as f:
        assert parse_proc_net_route(f.read()) == gw


class FakeLocal(LocalHost):
    """A LocalHost whose `ip` is a script we control (argv replaced, never a shell)."""

    def __init__(self, script: str) -> None:
        super().__init__()
        self.script = script

    async def run(self, argv, timeout, env=None, cwd=None):
        return await super().run([sys.executable, "-c", self.script], timeout)


def test_resolve_gateway_falls_back_to_proc(tmp_path):
    proc = tmp_path / "route"
    proc.write_text(PROC_HEADER + "eth0\t00000000\t0160A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    fail = FakeLocal("import sys; print('ip: not found', file=sys.stderr); sys.exit(127)")
    assert asyncio.run(resolve_gateway(fail, proc_route=str(proc))) == "192.168.96.1"


def test_resolve_gateway_failure_is_clear(tmp_path):
    proc = tmp_path / "route"
    proc.write_text(PROC_HEADER)
    noroute = FakeLocal("print('10.0.0.0/8 dev eth0')")
    with pytest.raises(GatewayError, match="no 'default via' route.*no default gateway in"):
        asyncio.run(resolve_gateway(noroute, proc_route=str(proc)))
    with pytest.raises(GatewayError, match="failed: exit 3.*No such file"):
        asyncio.run(resolve_gateway(FakeLocal("raise SystemExit(3)"), proc_route=str(tmp_path / "none")))


def test_make_host_types():
    assert isinstance(make_host(HostConfig(name="l", type="local")), LocalHost)
    assert isinstance(make_host(HostConfig(name="w", type="wsl-interop", os="windows")), WslInteropHost)
    s = make_host(HostConfig(name="s", type="ssh", address="10.9.9.9", os="windows"))
    assert isinstance(s, SshHost) and s.os == "windows" and s.address == "10.9.9.9"
    with pytest.raises(ValueError, match="unknown type"):
        make_host(HostConfig(name="x", type="telnet"))
    with pytest.raises(ValueError, match="@gateway"):
        make_host(HostConfig(name="g", type="ssh", address="@gateway"))


def test_make_hosts_resolves_gateway_once():
    calls = []

    async def resolver():
        calls.append(1)
        return "172.29.96.1"

    cfgs = {"win": HostConfig(name="win", type="ssh", address="@gateway", os="windows"),
            "win2": HostConfig(name="win2", type="ssh", address="@gateway", os="windows", port=2222),
            "wsl": HostConfig(name="wsl", type="local")}
    hosts = asyncio.run(make_hosts(cfgs, resolver=resolver))
    assert calls == [1]
    assert hosts["win"].address == "172.29.96.1" and hosts["win2"].port == 2222
    assert cfgs["win"].address == "@gateway"  # never written back
    assert isinstance(hosts["wsl"], LocalHost)


def test_make_hosts_gateway_failure_makes_that_host_unavailable():
    async def resolver():
        raise GatewayError("cannot resolve @gateway: no route")

    cfgs = {"win": HostConfig(name="win", type="ssh", address="@gateway", os="windows"),
            "wsl": HostConfig(name="wsl", type="local")}
    hosts = asyncio.run(make_hosts(cfgs, resolver=resolver))
    assert isinstance(hosts["win"], UnavailableHost) and hosts["win"].os == "windows"
    r = asyncio.run(hosts["win"].run(["tasklist"], 5))
    assert r.rc is None and r.error == "transport: cannot resolve @gateway: no route" and not r.ok
    assert isinstance(hosts["wsl"], LocalHost)
