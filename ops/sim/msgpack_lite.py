"""A minimal msgpack codec: just enough for rpclib's msgpack-rpc, with no new dependency.

Covers nil, bool, int (every width, negative included), float32/64, str, bin, array, map, and decodes
ext types into `Ext` (CARLA does not send them, but a decoder that chokes on a valid message would make
the fake server fail in a way the real one does not).

Streams: rpclib sends back-to-back msgpack objects on one TCP connection with no framing, so `Unpacker`
buffers bytes and yields each complete object; a partial object waits for more bytes (`Incomplete`).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Ext", "Incomplete", "FormatError", "packb", "unpackb", "Unpacker"]


class Incomplete(Exception):
    """The buffer ends inside an object: feed more bytes."""


class FormatError(ValueError):
    """The bytes are not msgpack (a reserved type byte, invalid UTF-8, an unhashable map key...)."""


@dataclass(frozen=True)
class Ext:
    code: int
    data: bytes


# --------------------------------------------------------------------------------------------- encoding

def packb(obj: Any, *, single_float: bool = False) -> bytes:
    """Encode obj. Floats are float64 unless single_float (msgpack-python's default, too)."""
    out = bytearray()
    _pack(obj, out, single_float)
    return bytes(out)


def _pack(obj: Any, out: bytearray, single_float: bool) -> None:
    # bool before int: bool is a subclass of int in Python.
    if obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif isinstance(obj, int):
        _pack_int(obj, out)
    elif isinstance(obj, float):
        if single_float:
            out.append(0xCA)
            out += struct.pack(">f", obj)
        else:
            out.append(0xCB)
            out += struct.pack(">d", obj)
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 0x100:
            out += bytes((0xD9, n))
        elif n < 0x10000:
            out.append(0xDA)
            out += struct.pack(">H", n)
        elif n < 0x1_0000_0000:
            out.append(0xDB)
            out += struct.pack(">I", n)
        else:
            raise ValueError("str too long for msgpack")
        out += data
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        n = len(data)
        if n < 0x100:
            out += bytes((0xC4, n))
        elif n < 0x10000:
            out.append(0xC5)
            out += struct.pack(">H", n)
        elif n < 0x1_0000_0000:
            out.append(0xC6)
            out += struct.pack(">I", n)
        else:
            raise ValueError("bin too long for msgpack")
        out += data
    elif isinstance(obj, (list, tuple)):
        _pack_len(len(obj), out, 0x90, 0xDC, 0xDD)
        for item in obj:
            _pack(item, out, single_float)
    elif isinstance(obj, dict):
        _pack_len(len(obj), out, 0x80, 0xDE, 0xDF)
        for key, value in obj.items():
            _pack(key, out, single_float)
            _pack(value, out, single_float)
    elif isinstance(obj, Ext):
        _pack_ext(obj, out)
    else:
        raise TypeError(f"cannot msgpack-encode {type(obj).__name__}")


def _pack_int(n: int, out: bytearray) -> None:
    # Smallest encoding that holds n, the way every msgpack implementation does it.
    if 0 <= n < 0x80:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        if n < 0x100:
            out += bytes((0xCC, n))
        elif n < 0x10000:
            out.append(0xCD)
            out += struct.pack(">H", n)
        elif n < 0x1_0000_0000:
            out.append(0xCE)
            out += struct.pack(">I", n)
        elif n < 0x1_0000_0000_0000_0000:
            out.append(0xCF)
            out += struct.pack(">Q", n)
        else:
            raise OverflowError("int too large for msgpack")
    else:
        if n >= -0x80:
            out.append(0xD0)
            out += struct.pack(">b", n)
        elif n >= -0x8000:
            out.append(0xD1)
            out += struct.pack(">h", n)
        elif n >= -0x8000_0000:
            out.append(0xD2)
            out += struct.pack(">i", n)
        elif n >= -0x8000_0000_0000_0000:
            out.append(0xD3)
            out += struct.pack(">q", n)
        else:
            raise OverflowError("int too small for msgpack")


def _pack_len(n: int, out: bytearray, fix: int, b16: int, b32: int) -> None:
    if n < 16:
        out.append(fix | n)
    elif n < 0x10000:
        out.append(b16)
        out += struct.pack(">H", n)
    else:
        out.append(b32)
        out += struct.pack(">I", n)


_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def _pack_ext(ext: Ext, out: bytearray) -> None:
    n = len(ext.data)
    if n in _FIXEXT:
        out.append(_FIXEXT[n])
    elif n < 0x100:
        out += bytes((0xC7, n))
    elif n < 0x10000:
        out.append(0xC8)
        out += struct.pack(">H", n)
    else:
        out.append(0xC9)
        out += struct.pack(">I", n)
    out += struct.pack(">b", ext.code)
    out += ext.data


# --------------------------------------------------------------------------------------------- decoding

def unpackb(data: bytes) -> Any:
    """Decode exactly one object; trailing bytes are an error (they would hide a framing bug)."""
    obj, end = decode(data, 0)
    if end != len(data):
        raise FormatError(f"{len(data) - end} trailing bytes after the object")
    return obj


def decode(buf: bytes | bytearray | memoryview, pos: int) -> tuple[Any, int]:
    """Decode one object from buf at pos; return (object, position after it). Raises Incomplete."""
    b = _take(buf, pos, 1)[0]
    pos += 1
    if b < 0x80:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0xA0 <= b <= 0xBF:
        return _str(buf, pos, b & 0x1F)
    if 0x90 <= b <= 0x9F:
        return _array(buf, pos, b & 0x0F)
    if 0x80 <= b <= 0x8F:
        return _map(buf, pos, b & 0x0F)
    if b == 0xC0:
        return None, pos
    if b == 0xC2:
        return False, pos
    if b == 0xC3:
        return True, pos
    if b in _FIXED:
        fmt, size = _FIXED[b]
        return struct.unpack(fmt, _take(buf, pos, size))[0], pos + size
    if b in (0xD9, 0xDA, 0xDB):
        n, pos = _length(buf, pos, b - 0xD9)
        return _str(buf, pos, n)
    if b in (0xC4, 0xC5, 0xC6):
        n, pos = _length(buf, pos, b - 0xC4)
        return bytes(_take(buf, pos, n)), pos + n
    if b in (0xDC, 0xDD):
        n, pos = _length(buf, pos, b - 0xDC + 1)
        return _array(buf, pos, n)
    if b in (0xDE, 0xDF):
        n, pos = _length(buf, pos, b - 0xDE + 1)
        return _map(buf, pos, n)
    if 0xD4 <= b <= 0xD8:
        return _ext(buf, pos, 1 << (b - 0xD4))
    if b in (0xC7, 0xC8, 0xC9):
        n, pos = _length(buf, pos, b - 0xC7)
        return _ext(buf, pos, n)
    raise FormatError(f"reserved msgpack type byte 0x{b:02x}")


_FIXED: dict[int, tuple[str, int]] = {
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
    0xCA: (">f", 4), 0xCB: (">d", 8),
}
_LEN_FMT = ((">B", 1), (">H", 2), (">I", 4))


def _take(buf: bytes | bytearray | memoryview, pos: int, n: int) -> bytes | bytearray | memoryview:
    if pos + n > len(buf):
        raise Incomplete
    return buf[pos:pos + n]


def _length(buf: bytes | bytearray | memoryview, pos: int, width_index: int) -> tuple[int, int]:
    fmt, size = _LEN_FMT[width_index]
    return struct.unpack(fmt, _take(buf, pos, size))[0], pos + size


def _str(buf: bytes | bytearray | memoryview, pos: int, n: int) -> tuple[str, int]:
    raw = bytes(_take(buf, pos, n))
    try:
        return raw.decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise FormatError(f"invalid UTF-8 in str: {exc}") from None


def _array(buf: bytes | bytearray | memoryview, pos: int, n: int) -> tuple[list, int]:
    items = []
    for _ in range(n):
        item, pos = decode(buf, pos)
        items.append(item)
    return items, pos


def _map(buf: bytes | bytearray | memoryview, pos: int, n: int) -> tuple[dict, int]:
    result: dict = {}
    for _ in range(n):
        key, pos = decode(buf, pos)
        value, pos = decode(buf, pos)
        if isinstance(key, list):
            key = _freeze(key)
        try:
            result[key] = value
        except TypeError:
            raise FormatError(f"unhashable map key of type {type(key).__name__}") from None
    return result, pos


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _ext(buf: bytes | bytearray | memoryview, pos: int, n: int) -> tuple[Ext, int]:
    code = struct.unpack(">b", _take(buf, pos, 1))[0]
    data = bytes(_take(buf, pos + 1, n))
    return Ext(code, data), pos + 1 + n


class Unpacker:
    """Stream decoder: feed() bytes as they arrive, iterate for every complete object."""

    def __init__(self, max_buffer: int = 16 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._max = max_buffer

    def feed(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > self._max:
            # A peer that sends an endless half-object would otherwise grow us without bound.
            raise FormatError(f"msgpack stream buffer over {self._max} bytes without a complete object")

    def __iter__(self) -> Iterator[Any]:
        while self._buf:
            try:
                obj, end = decode(self._buf, 0)
            except Incomplete:
                return
            del self._buf[:end]
            yield obj

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a complete object."""
        return len(self._buf)
