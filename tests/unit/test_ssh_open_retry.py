"""A refused session open is tried again (sshd lags in freeing a session on a loaded host); the command
never ran, so a retry cannot run it twice. Past the retries the refusal is the evidence."""
from __future__ import annotations

import asyncio

import asyncssh
import pytest

from ops.model import HostConfig
from ops.platform.ssh import OPEN_RETRY_S, SshHost, TransportError


class Refusing:
    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.opens = 0

    async def create_process(self, command, **kw):
        self.opens += 1
        if self.opens <= self.refusals:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed")
        return ("process", command)


def host() -> SshHost:
    return SshHost(HostConfig("h", "ssh", address="127.0.0.1", known_hosts="/dev/null"))


def test_a_refused_open_is_tried_again_and_then_runs_once() -> None:
    conn = Refusing(refusals=2)
    assert asyncio.run(host()._open_session(conn, "echo hi")) == ("process", "echo hi")  # type: ignore[arg-type]
    assert conn.opens == 3


def test_refused_past_the_retries_is_a_transport_error_with_the_reason() -> None:
    conn = Refusing(refusals=100)
    with pytest.raises(TransportError, match="channel open failed on .*open failed"):
        asyncio.run(host()._open_session(conn, "echo hi"))  # type: ignore[arg-type]
    assert conn.opens == len(OPEN_RETRY_S) + 1
