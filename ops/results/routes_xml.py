"""A routes XML read for results and planning: per route its id, town, first scenario type, length and
the exact bytes of its <route> element.

ops/parse/routes.py answers "how many routes, which ids" for the resume rule; this adds what results and
splits need. The byte span lets `split` copy each <route> element unchanged (never re-serialised: the
user's routes are data we must not rewrite), and the first scenario's `type` is what Bench2Drive's
ability table keys on. Refuses DOCTYPE/ENTITY declarations like ops/parse/routes.py (entity expansion).
"""
from __future__ import annotations

import math
import xml.parsers.expat
from collections import Counter
from dataclasses import dataclass

from ops.parse.errors import ParseError
from ops.parse.routes import MAX_CHARS, checkpoint_route_id

WHAT = "routes xml"


@dataclass(frozen=True)
class RouteInfo:
    route_id: str                 # the <route id>, e.g. "1711"
    town: str
    scenario_type: str | None     # `type` of the first <scenario>; None when the route has none
    length_m: float               # polyline length of its waypoints (the evaluator's is close to it)
    start: int                    # byte offset of "<route"
    end: int                      # byte offset just after its closing ">"

    @property
    def checkpoint_id(self) -> str:
        return checkpoint_route_id(self.route_id)


@dataclass(frozen=True)
class RoutesTable:
    routes: tuple[RouteInfo, ...]
    data: bytes                   # the file's bytes; spans index into it
    duplicates: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.routes)

    def element(self, route: RouteInfo) -> bytes:
        return self.data[route.start:route.end]

    @property
    def head(self) -> bytes:
        """Everything before the first <route> (XML declaration, <routes ...> with its attributes)."""
        return self.data[:self.routes[0].start]

    @property
    def tail(self) -> bytes:
        """Everything after the last route element (the closing </routes>)."""
        return self.data[self.routes[-1].end:]

    @property
    def separator(self) -> bytes:
        """The whitespace between the first two routes, reused between routes of a written part."""
        if len(self.routes) < 2:
            return b"\n"
        gap = self.data[self.routes[0].end:self.routes[1].start]
        return gap if not gap.strip() else b"\n"

    def by_checkpoint_id(self) -> dict[str, RouteInfo]:
        return {r.checkpoint_id: r for r in self.routes}


class _Refused(Exception):
    """Internal: stops the parse from a handler. Never leaves this module."""


def parse_routes_table(data: bytes) -> RoutesTable | ParseError:
    """Parse a routes file's bytes; never raises."""
    if not isinstance(data, (bytes, bytearray)):
        return ParseError.of(WHAT, f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_CHARS:
        return ParseError.of(WHAT, f"input too large: {len(data)} bytes > {MAX_CHARS}")
    if not data.strip():
        return ParseError.of(WHAT, "empty file")
    parser = xml.parsers.expat.ParserCreate()
    parser.buffer_text = True   # character data is not needed: fewer callbacks
    routes: list[RouteInfo] = []
    cur: dict = {}

    def start(tag: str, attrs: dict[str, str]) -> None:
        # Positions are most of the elements (~15,000 in the 220 routes): their branch comes first.
        if tag == "position" and cur:
            try:
                cur["points"].append((float(attrs["x"]), float(attrs["y"]), float(attrs["z"])))
            except (KeyError, ValueError):
                raise _Refused(f"<position> (line {parser.CurrentLineNumber}) of route {cur['id']} "
                               "lacks a numeric x, y or z") from None
        elif tag == "route":
            if cur:
                raise _Refused(f"<route> nested in <route> (line {parser.CurrentLineNumber})")
            rid, town = attrs.get("id"), attrs.get("town")
            if not rid or not town:
                raise _Refused(f"<route> #{len(routes) + 1} (line {parser.CurrentLineNumber}) lacks id or town")
            cur.update(id=rid, town=town, type=None, seen_scenario=False, points=[],
                       start=parser.CurrentByteIndex, line=parser.CurrentLineNumber)
        elif tag == "scenario" and cur and not cur["seen_scenario"]:
            cur["seen_scenario"] = True
            cur["type"] = attrs.get("type")

    def end(tag: str) -> None:
        if tag != "route":
            return
        at = parser.CurrentByteIndex
        close = data.find(b">", at)
        pts = cur["points"]
        routes.append(RouteInfo(route_id=cur["id"], town=cur["town"], scenario_type=cur["type"],
                                length_m=sum(math.dist(a, b) for a, b in zip(pts, pts[1:])),
                                start=cur["start"], end=close + 1))
        cur.clear()

    def refuse_doctype(*_args: object) -> None:
        raise _Refused("a DOCTYPE/ENTITY declaration (refused: entity expansion)")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.EntityDeclHandler = refuse_doctype
    parser.UnparsedEntityDeclHandler = refuse_doctype
    parser.ExternalEntityRefHandler = refuse_doctype  # type: ignore[assignment]
    try:
        parser.Parse(data, True)
    except _Refused as exc:
        return ParseError.of(WHAT, str(exc), data[:4096].decode("utf-8", "replace"))
    except (xml.parsers.expat.ExpatError, ValueError, RecursionError) as exc:
        return ParseError.of(WHAT, f"not well-formed XML: {exc}", data[:4096].decode("utf-8", "replace"))
    if not routes:
        return ParseError.of(WHAT, "no <route> element", data[:4096].decode("utf-8", "replace"))
    seen = Counter(r.route_id for r in routes)
    return RoutesTable(routes=tuple(routes), data=data,
                       duplicates=tuple(rid for rid, n in seen.items() if n > 1))


def union(tables: list[RoutesTable]) -> tuple[RouteInfo, ...]:
    """The routes of several files (a rig's split parts), each id once, first file first."""
    seen: set[str] = set()
    out: list[RouteInfo] = []
    for table in tables:
        for r in table.routes:
            if r.route_id not in seen:
                seen.add(r.route_id)
                out.append(r)
    return tuple(out)
