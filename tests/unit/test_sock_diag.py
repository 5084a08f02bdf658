"""sock_diag against real sockets: it lists what /proc/net/tcp lists, and a connect agrees with it."""
from __future__ import annotations

import os
import socket

import pytest

from ops.platform import listeners
from ops.platform.sock_diag import listening_sockets


def _proc_listen_sockets() -> set[tuple[int, str, int]]:
    real = listeners.listening_sockets
    try:
        listeners.listening_sockets = _refused   # type: ignore[assignment]
        return {(s.port, str(s.address), s.inode) for s in listeners.listen_sockets()}
    finally:
        listeners.listening_sockets = real     # type: ignore[assignment]


def _refused(timeout: float = 1.0):
    raise PermissionError("sock_diag refused (as under a seccomp filter)")


def test_it_lists_a_listener_with_its_address_port_and_inode() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        try:
            v6.bind(("::1", 0))
            v6.listen()
        except OSError:
            v6 = None   # type: ignore[assignment]
        got = {(s.port, str(s.address), s.inode) for s in listening_sockets()}
        assert (v4.getsockname()[1], "127.0.0.1", os.fstat(v4.fileno()).st_ino) in got
        if v6 is not None:
            assert (v6.getsockname()[1], "::1", os.fstat(v6.fileno()).st_ino) in got


def test_it_agrees_with_the_proc_tables_it_replaces() -> None:
    with socket.socket() as srv:
        srv.bind(("0.0.0.0", 0))
        srv.listen()
        for _ in range(3):   # another process may open or close a listener between the two reads
            by_diag = {(s.port, str(s.address), s.inode) for s in listening_sockets()}
            by_proc = _proc_listen_sockets()
            if by_diag == by_proc:
                break
    assert by_diag == by_proc


def test_a_bound_socket_that_does_not_listen_is_not_listed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] not in {x.port for x in listening_sockets()}


def test_where_the_kernel_refuses_the_proc_tables_answer() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert (srv.getsockname()[1], "127.0.0.1", os.fstat(srv.fileno()).st_ino) in _proc_listen_sockets()


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
def test_loopback_listeners_names_what_a_connect_reaches(address: str) -> None:
    with socket.socket() as srv:
        srv.bind((address, 0))
        srv.listen()
        assert listeners.loopback_listeners(srv.getsockname()[1]) == [address]


def test_the_sides_of_one_beat_share_one_listing(monkeypatch) -> None:
    calls = []
    real = listeners.listen_sockets
    monkeypatch.setattr(listeners, "listen_sockets", lambda: calls.append(1) or real())
    monkeypatch.setattr(listeners, "_recent", None)
    listeners.loopback_listeners(2000, fresh_within_s=60.0)
    listeners.loopback_listeners(2001, fresh_within_s=60.0)
    assert len(calls) == 1
    listeners.loopback_listeners(2000)          # no sharing asked: a listing of its own
    assert len(calls) == 2
