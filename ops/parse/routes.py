"""The routes XML given to the evaluator with `--routes`: how many routes, which ids, which towns.

The count matters because Bench2Drive's resume empties the checkpoint when `progress[1]` differs from
the number of routes; the console checks that before every resume.

Read with the expat parser underneath xml.etree, without building a tree (the 220-route file is 693 KB
of waypoints we do not need). As defusedxml does, a document type declaration is refused outright:
an entity there is how an "XML bomb" expands to gigabytes, and a routes file has no use for one.
"""
from __future__ import annotations

import xml.parsers.expat
from collections import Counter
from dataclasses import dataclass

from ops.parse.errors import ParseError, as_text

WHAT = "routes xml"
# bench2drive220.xml is 693 KB and Leaderboard 2.0's largest routes files a few MB; streaming 16 MB
# through expat takes well under a second.
MAX_CHARS = 16_000_000
ROUTE_TAG = "route"


@dataclass(frozen=True)
class RoutesFile:
    route_ids: tuple[str, ...]      # the `id` of every <route>, in file order
    towns: tuple[str, ...]          # the `town` of every <route>, parallel to route_ids
    duplicates: tuple[str, ...] = ()  # ids seen more than once: Bench2Drive's indexer collapses them

    @property
    def count(self) -> int:
        """The route count Bench2Drive's RouteIndexer uses as `total` (repetitions = 1)."""
        return len(self.route_ids)

    def town_counts(self) -> dict[str, int]:
        return dict(Counter(self.towns).most_common())

    def checkpoint_ids(self, repetitions: int = 1) -> tuple[str, ...]:
        """The `route_id` each checkpoint record will carry, in run order."""
        return tuple(checkpoint_route_id(rid, rep) for rid in self.route_ids for rep in range(repetitions))


def checkpoint_route_id(route_id: str, repetition: int = 0) -> str:
    """RouteParser names a route "RouteScenario_<id>", the indexer appends "_rep<n>"."""
    return f"RouteScenario_{route_id}_rep{repetition}"


class _Refused(Exception):
    """Internal: raised from an expat handler to stop the parse. Never leaves this module."""


def parse_routes(text: str | bytes) -> RoutesFile | ParseError:
    """Parse a routes file's content; never raises."""
    if isinstance(text, (bytes, bytearray)):
        raw = bytes(text)
        if len(raw) > MAX_CHARS:
            return ParseError.of(WHAT, f"input too large: {len(raw)} bytes > {MAX_CHARS}",
                                 raw[:300].decode("utf-8", "replace"))
        data: str | bytes = raw
    else:
        checked = as_text(WHAT, text, MAX_CHARS)
        if isinstance(checked, ParseError):
            return checked
        data = checked
    if not data.strip():
        return ParseError.of(WHAT, "empty file")
    return _parse(data)


def _parse(data: str | bytes) -> RoutesFile | ParseError:
    # Bytes keep their declared encoding; a str is already decoded, so tell expat it is UTF-8
    # (the encoding the str is handed over in) whatever the XML declaration says.
    parser = xml.parsers.expat.ParserCreate(encoding=None if isinstance(data, bytes) else "utf-8")
    ids: list[str] = []
    towns: list[str] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        if tag != ROUTE_TAG:
            return
        rid, town = attrs.get("id"), attrs.get("town")
        if not rid or not town:
            # RouteParser reads route.attrib['id'] and ['town']: the evaluator would die on a KeyError.
            raise _Refused(f"<route> #{len(ids) + 1} (line {parser.CurrentLineNumber}) lacks id or town")
        ids.append(rid)
        towns.append(town)

    def refuse_doctype(*_args: object) -> None:
        raise _Refused("a DOCTYPE/ENTITY declaration (refused: entity expansion)")

    parser.StartElementHandler = start
    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.EntityDeclHandler = refuse_doctype
    parser.UnparsedEntityDeclHandler = refuse_doctype
    parser.ExternalEntityRefHandler = refuse_doctype  # type: ignore[assignment]
    try:
        parser.Parse(data, True)
    except _Refused as exc:
        return ParseError.of(WHAT, str(exc), _text(data), _offset(parser))
    except (xml.parsers.expat.ExpatError, ValueError, RecursionError) as exc:
        return ParseError.of(WHAT, f"not well-formed XML: {exc}", _text(data), _offset(parser))
    if not ids:
        return ParseError.of(WHAT, "no <route> element", _text(data))
    seen = Counter(ids)
    return RoutesFile(route_ids=tuple(ids), towns=tuple(towns),
                      duplicates=tuple(rid for rid, n in seen.items() if n > 1))


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data[:4096].decode("utf-8", "replace")


def _offset(parser: xml.parsers.expat.XMLParserType) -> int | None:
    try:
        return int(parser.CurrentByteIndex)
    except Exception:  # noqa: BLE001 - only an excerpt position: never worth failing the parse over
        return None
