"""tcp_check against real sockets on 127.0.0.1: accepted, refused (positive absence), silent (UNKNOWN)."""
from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from ops.platform.verbs import tcp_check


def test_a_listening_port_is_accepted() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        res = asyncio.run(tcp_check("127.0.0.1", srv.getsockname()[1], 5.0))
    assert res.open is True and res.evidence.detail == "accepted"


def test_a_closed_port_is_refused_which_is_positive_evidence() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, never listening: the kernel answers RST
        res = asyncio.run(tcp_check("127.0.0.1", port, 5.0))
    assert res.open is False and res.evidence.ok and res.evidence.detail == "refused"


def test_a_name_is_resolved_too() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        res = asyncio.run(tcp_check("localhost", srv.getsockname()[1], 5.0))
    assert res.open is True


def test_an_unresolvable_name_is_unknown_with_the_error() -> None:
    res = asyncio.run(tcp_check("no-such-host.invalid", 2000, 5.0))
    assert res.open is None and not res.evidence.ok and res.evidence.error


# ----- port_check: a local host's listening sockets answer yes; no comes from a real connect ---------------

def _local():
    from ops.platform import listeners
    from ops.platform.local import LocalHost
    listeners._recent = None   # a listing shared with the last check would not show this test's socket
    return LocalHost("local")


def _listening(family: int, address: str, v6only: bool | None = None) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
    s.bind((address, 0))
    s.listen(4)
    return s


def test_port_check_reads_a_local_listener_from_the_kernel_without_connecting() -> None:
    from ops.platform.verbs import port_check
    with _listening(socket.AF_INET, "0.0.0.0") as srv:
        srv.setblocking(False)
        res = asyncio.run(port_check(_local(), srv.getsockname()[1], 5.0))
        with pytest.raises(BlockingIOError):
            srv.accept()                    # nobody connected
    assert res.open is True and res.evidence.what.startswith("tcp listen") and "0.0.0.0" in res.evidence.detail


@pytest.mark.parametrize("family,address,v6only", [
    (socket.AF_INET, "127.0.0.1", None), (socket.AF_INET, "0.0.0.0", None), (socket.AF_INET6, "::", False),
    (socket.AF_INET6, "::1", None)])
def test_port_check_agrees_with_a_connect(family: int, address: str, v6only: bool | None) -> None:
    from ops.platform.verbs import port_check
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        srv = _listening(family, address, v6only)
    except OSError as e:
        pytest.skip(f"cannot listen on {address}: {e}")
    with srv:
        port = srv.getsockname()[1]
        by_table = asyncio.run(port_check(_local(), port, 5.0))
        by_connect = asyncio.run(tcp_check("127.0.0.1", port, 5.0))
    assert by_table.open == by_connect.open, (by_table, by_connect)


def test_port_check_takes_refused_only_from_a_real_connect() -> None:
    from ops.platform.verbs import port_check
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, never listening
        res = asyncio.run(port_check(_local(), port, 5.0))
    assert res.open is False and res.evidence.what.startswith("tcp connect") and res.evidence.detail == "refused"


def test_loopback_listeners_decodes_the_kernel_addresses() -> None:
    from ops.platform.listeners import _proc_address
    assert str(_proc_address("0100007F" if sys.byteorder == "little" else "7F000001")) == "127.0.0.1"
    assert str(_proc_address("00000000000000000000000000000000")) == "::"
