"""The server's address as the evaluator's host reaches it: `--host` and the console's port checks."""
from __future__ import annotations

import asyncio

from ops.model import HostConfig
from ops.platform.factory import make_hosts
from ops.platform.gateway import GatewayError
from ops.platform.verbs import tcp_check


async def _gw() -> str:
    return "10.213.7.1"


async def _no_gw() -> str:
    raise GatewayError("no default route")


def test_ssh_at_gateway_and_wsl_interop_are_checked_at_the_gateway_not_localhost() -> None:
    cfgs = {"win": HostConfig("win", "ssh", os="windows", address="@gateway", user="carla"),
            "lin": HostConfig("lin", "ssh", address="192.0.2.5"),
            "interop": HostConfig("interop", "wsl-interop", os="windows"),
            "wsl": HostConfig("wsl", "local")}
    hosts = asyncio.run(make_hosts(cfgs, resolver=_gw))
    assert hosts["win"].tcp_address == "10.213.7.1"
    assert hosts["lin"].tcp_address == "192.0.2.5"
    assert hosts["interop"].tcp_address == "10.213.7.1"
    assert hosts["wsl"].tcp_address == "127.0.0.1"


def test_unresolved_gateway_is_unknown_never_this_machine() -> None:
    cfgs = {"win": HostConfig("win", "ssh", os="windows", address="@gateway"),
            "interop": HostConfig("interop", "wsl-interop", os="windows")}
    hosts = asyncio.run(make_hosts(cfgs, resolver=_no_gw))
    for h in hosts.values():
        assert h.tcp_address != "127.0.0.1"
        check = asyncio.run(tcp_check(h.tcp_address, 22, 2.0))
        assert check.open is None and check.evidence.error
