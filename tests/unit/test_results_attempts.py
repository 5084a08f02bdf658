"""Per-route attempts from the supervisor's failure counts (keys in either id form) and the records."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ops.parse.checkpoint import parse_checkpoint
from ops.results.attempts import failures_of, route_attempts
from ops.results.merge import Source, merge
from ops.results.routes_xml import parse_routes_table

DATA = Path(__file__).resolve().parents[1] / "data"


def test_attempts_count_failures_and_the_run_that_left_the_record():
    table = parse_routes_table((DATA / "bench2drive220.xml").read_bytes())
    cp = parse_checkpoint((DATA / "b2d_checkpoint_tfpp_0.json").read_text())
    merged = merge(table.routes, [Source("a", cp)], retired=["2403"])
    states = [SimpleNamespace(route_failures={"RouteScenario_1711_rep0": 2, "2403": 3}),
              SimpleNamespace(route_failures={"1711": 1, "bad": "x"}),
              SimpleNamespace(attempt=2)]                      # a harness without the supervisor's counts
    failures = failures_of(states)
    assert failures == {"1711": 3, "2403": 3}
    attempts = route_attempts(merged, failures)
    assert attempts["1711"] == 4                  # three failed runs, then the one whose record is there
    assert attempts["2403"] == 3                  # retired after three failures, no record
    assert attempts["1773"] == 1 and "2416" not in attempts
