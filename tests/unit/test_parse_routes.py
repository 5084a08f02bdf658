"""ops.parse.routes: route counts of the real Bench2Drive files, and hostile XML refused."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from ops.parse import ParseError, RoutesFile, checkpoint_route_id, parse_routes
from ops.parse.routes import MAX_CHARS

DATA = Path(__file__).resolve().parents[1] / "data"
B2D220 = DATA / "bench2drive220.xml"
DEV10 = DATA / "drivetransformer_bench2drive_dev10.xml"

# From /work/shared/fixtures/SOURCES.md (copied into tests/data/SOURCES.md with the file's sha256).
TOWNS_220 = {"Town12": 104, "Town13": 47, "Town04": 12, "Town03": 11, "Town05": 9, "Town11": 7, "Town15": 7,
             "Town06": 6, "Town07": 5, "Town01": 4, "Town02": 4, "Town10HD": 4}


def test_the_220_file_is_the_recorded_one() -> None:
    assert hashlib.sha256(B2D220.read_bytes()).hexdigest() == \
        "ffff24b3a2b8584632730fb42de7cb6036af780c3952cfef08ee8cf96a712f88"


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_bench2drive220(as_bytes: bool) -> None:
    data = B2D220.read_bytes() if as_bytes else B2D220.read_text(encoding="utf-8")
    started = time.perf_counter()
    rf = parse_routes(data)
    took = time.perf_counter() - started
    assert isinstance(rf, RoutesFile), rf
    assert rf.count == 220 and len(set(rf.route_ids)) == 220 and rf.duplicates == ()
    assert rf.town_counts() == TOWNS_220
    assert rf.route_ids[0] == "1711" and rf.towns[0] == "Town12"
    assert took < 1.0  # streaming, no tree: ~30 ms here


def test_dev10_ids_towns_and_checkpoint_ids() -> None:
    rf = parse_routes(DEV10.read_text(encoding="utf-8"))
    assert isinstance(rf, RoutesFile)
    assert rf.route_ids == ("3514", "3255", "26405", "25381", "25378", "25424", "2091", "27494", "17569", "28198")
    assert rf.towns == ("Town13", "Town13", "Town15", "Town05", "Town03", "Town11", "Town12", "Town04", "Town12",
                        "Town15")
    assert rf.checkpoint_ids()[:2] == ("RouteScenario_3514_rep0", "RouteScenario_3255_rep0")
    assert rf.checkpoint_ids(repetitions=2)[:3] == ("RouteScenario_3514_rep0", "RouteScenario_3514_rep1",
                                                    "RouteScenario_3255_rep0")
    assert checkpoint_route_id("1711") == "RouteScenario_1711_rep0"


def test_the_checkpoint_sample_ids_are_in_the_220_file() -> None:
    import json
    rf = parse_routes(B2D220.read_text(encoding="utf-8"))
    assert isinstance(rf, RoutesFile)
    records = json.loads((DATA / "b2d_checkpoint_tfpp_0.json").read_text())["_checkpoint"]["records"]
    assert {r["route_id"] for r in records} <= set(rf.checkpoint_ids())


def test_duplicates_are_reported() -> None:
    rf = parse_routes('<routes><route id="1" town="Town01"/><route id="2" town="Town02"/>'
                      '<route id="1" town="Town01"/></routes>')
    assert isinstance(rf, RoutesFile)
    assert rf.count == 3 and rf.duplicates == ("1",)


def test_declared_encoding_and_bom() -> None:
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?><routes><route id="é1" town="Town01"/></routes>'
    assert parse_routes(latin.encode("latin-1")) == RoutesFile(route_ids=("é1",), towns=("Town01",))
    assert parse_routes(latin) == RoutesFile(route_ids=("é1",), towns=("Town01",))  # a str is already decoded
    assert parse_routes(b"\xef\xbb\xbf<routes><route id='1' town='T'/></routes>") == RoutesFile(("1",), ("T",))
    assert parse_routes("\ufeff<routes><route id='1' town='T'/></routes>") == RoutesFile(("1",), ("T",))


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<routes><route id="1" town="&lol9;"/></routes>"""


@pytest.mark.parametrize("text, why", [
    (BILLION_LAUGHS, "DOCTYPE"),
    ('<!DOCTYPE routes SYSTEM "http://example.invalid/r.dtd"><routes><route id="1" town="T"/></routes>', "DOCTYPE"),
    ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><routes>&x;</routes>', "DOCTYPE"),
    ("", "empty"),
    ("  \n", "empty"),
    ("<routes></routes>", "no <route>"),
    ("<html><body>502 Bad Gateway</body></html>", "no <route>"),
    ('<routes><route id="1" town="T"><waypoints>', "not well-formed"),
    ('<routes><route id="1" town="T"/>', "not well-formed"),
    ('<routes><route town="T"/></routes>', "lacks id or town"),
    ('<routes><route id="1"/></routes>', "lacks id or town"),
    ('<routes><route id="" town="T"/></routes>', "lacks id or town"),
    ("not xml at all", "not well-formed"),
    ("<routes>\udc80</routes>", "not well-formed"),  # a lone surrogate cannot be encoded for expat
])
def test_refused(text: str, why: str) -> None:
    result = parse_routes(text)
    assert isinstance(result, ParseError), result
    assert why in result.reason and result.what == "routes xml"
    assert len(result.text) <= 300


def test_truncated_real_file_is_refused() -> None:
    text = B2D220.read_text(encoding="utf-8")
    for cut in (10, 1000, len(text) // 2, len(text) - 12):
        assert isinstance(parse_routes(text[:cut]), ParseError), cut


def test_oversized_and_non_text() -> None:
    assert isinstance(parse_routes(" " * (MAX_CHARS + 1)), ParseError)
    assert isinstance(parse_routes(b" " * (MAX_CHARS + 1)), ParseError)
    assert isinstance(parse_routes(None), ParseError)  # type: ignore[arg-type]
    assert isinstance(parse_routes(3.5), ParseError)  # type: ignore[arg-type]
