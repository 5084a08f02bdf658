"""ops.parse.errors: the failure value and its bounded evidence."""
from __future__ import annotations

import pytest

from ops.parse import ParseError
from ops.parse.errors import EXCERPT_CHARS, as_text, excerpt


def test_short_text_is_kept_whole() -> None:
    err = ParseError.of("tool", "bad", "short")
    assert err == ParseError("tool", "bad", "short")
    assert str(err) == "tool: bad ['short']"
    assert str(ParseError.of("tool", "empty")) == "tool: empty"


@pytest.mark.parametrize("at", [None, 0, 10, 5_000, 9_999, 10_000, 50_000, -5])
def test_excerpt_is_bounded_and_centred(at: int | None) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    cut = excerpt(text, at)
    assert len(cut) <= EXCERPT_CHARS
    if at is not None and 0 <= at < len(text):
        assert text[at] in cut


def test_parse_error_is_frozen_and_hashable() -> None:
    err = ParseError.of("tool", "bad", "x" * 10_000)
    assert len(err.text) <= EXCERPT_CHARS
    hash(err)
    with pytest.raises(AttributeError):
        err.reason = "other"  # type: ignore[misc]


@pytest.mark.parametrize("data, expected", [
    ("abc", "abc"), ("\ufeffabc", "abc"), (b"abc", "abc"), (b"\xef\xbb\xbfabc", "abc"),
    (bytearray(b"a\xffb"), "a\ufffdb"), (memoryview(b"xy"), "xy"),
])
def test_as_text_accepts(data: object, expected: str) -> None:
    assert as_text("t", data, 100) == expected


@pytest.mark.parametrize("data", [None, 1, ["a"], "x" * 101, b"x" * 101])
def test_as_text_refuses(data: object) -> None:
    assert isinstance(as_text("t", data, 100), ParseError)
