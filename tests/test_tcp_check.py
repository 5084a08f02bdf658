"""tcp_check against real sockets on 127.0.0.1: accepted, refused (positive absence), silent (UNKNOWN)."""
from __future__ import annotations

import asyncio
import socket

from ops.hostops import tcp_check


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
