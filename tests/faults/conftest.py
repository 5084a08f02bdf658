"""Fault-suite hooks: `@pytest.mark.scenario` tests report `scenario <name> <passed|failed>` to
$CARLA_FAULTS_COUNT_FILE (tests/faults/report.py sums those lines; nothing is counted by hand)."""
from __future__ import annotations

import pytest

from tests.faults.harness_kit import count


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario(name): an end-to-end fault scenario counted by report.py")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    mark = item.get_closest_marker("scenario")
    if mark is None:
        return rep
    name = mark.args[0] if mark.args else item.name
    # One line per scenario: its call phase, or the setup/teardown phase that broke it.
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        outcome = "passed" if rep.passed else "failed"     # an xfail is not a pass
        if hasattr(rep, "wasxfail"):
            outcome = "failed"
        count(f"scenario {name} {outcome}")
    elif rep.when == "teardown" and rep.failed:
        count(f"scenario {name} failed-teardown")
    return rep
