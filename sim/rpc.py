"""rpclib's msgpack-rpc as CARLA uses it: framing shared by the fake server and a tiny raw client.

Wire facts (design.md §4): request `[0, msgid, method, params]`, response `[1, msgid, error, result]`.
CARLA wraps every result in its `Response<T>`: `[[1, value]]` on success, `[[0, [message]]]` on error;
the real client raises std::bad_cast on a bare value, so the wrapping is not optional.

The raw client (`call`) exists for the sim's own readiness checks and for tests: it needs no `carla`
package and tells "refused" from "accepts but silent" (a timeout) the way a TCP probe does.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

import msgpack

REQUEST = 0
RESPONSE = 1
NOTIFY = 2


def ok(value: Any) -> list:
    """CARLA's Response<T> holding a value."""
    return [[1, value]]


def error(message: str) -> list:
    """CARLA's Response<T> holding a ResponseError."""
    return [[0, [message]]]


def response(msgid: int, result: Any) -> bytes:
    return msgpack.packb([RESPONSE, msgid, None, result])


def request(msgid: int, method: str, params: list) -> bytes:
    return msgpack.packb([REQUEST, msgid, method, params])


@dataclass(frozen=True)
class Reply:
    msgid: int
    error: Any
    result: Any

    @property
    def value(self) -> Any:
        """The T of a successful Response<T>; raises RuntimeError with CARLA's message otherwise."""
        if self.error is not None:
            raise RuntimeError(f"rpc error: {self.error!r}")
        try:
            (tag, payload), = self.result
        except (TypeError, ValueError):
            raise RuntimeError(f"not a CARLA Response<T>: {self.result!r}") from None
        if tag == 1:
            return payload
        raise RuntimeError(payload[0] if isinstance(payload, list) and payload else repr(payload))


class Connection:
    """One keep-alive msgpack-rpc connection (several calls on one socket, like rpclib's client)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(timeout)
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self._next_id = 0

    def call(self, method: str, params: list | None = None) -> Reply:
        """Send one request and wait for its reply (socket.timeout if the server stays silent)."""
        msgid = self._next_id
        self._next_id += 1
        self._sock.sendall(request(msgid, method, [[False]] if params is None else params))
        while True:
            for msg in self._unpacker:
                if isinstance(msg, list) and len(msg) == 4 and msg[0] == RESPONSE and msg[1] == msgid:
                    return Reply(msgid, msg[2], msg[3])
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            self._unpacker.feed(data)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call(host: str, port: int, method: str, params: list | None = None, timeout: float = 2.0) -> Reply:
    """One call on a fresh connection."""
    with Connection(host, port, timeout) as conn:
        return conn.call(method, params)


def wait_version(host: str, port: int, deadline_s: float, *, stop_if: Any = None) -> str:
    """Poll `version` until it answers or deadline_s passes (TimeoutError).

    stop_if: a callable returning a reason string to give up early (e.g. the server process died), or None.
    """
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        if stop_if is not None:
            reason = stop_if()
            if reason:
                raise RuntimeError(reason)
        try:
            return str(call(host, port, "version", timeout=min(1.0, max(0.1, end - time.monotonic()))).value)
        except (OSError, RuntimeError) as exc:
            last = exc
            time.sleep(0.05)
    raise TimeoutError(f"no answer to 'version' on {host}:{port} within {deadline_s} s (last: {last!r})")
