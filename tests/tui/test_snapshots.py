"""Snapshot tests on frozen, hand-built snapshots (tests/tui/fakes.py): no timing, no real pids.

Update after a deliberate change with `pytest tests/tui/test_snapshots.py --snapshot-update` and look at
the SVGs in tests/tui/__snapshots__ before committing them.
"""
from __future__ import annotations

from console.tui.app import ConsoleApp
from tests.tui.fakes import T0, FakeBackend, FakeRecovery, kill_plan, rig_config, stale, with_unknown_evaluator

AUDIT = [
    {"time": T0 - 120, "side": "A", "operation": "stop-chain", "outcome": "refused",
     "detail": "heartbeat FRESH: stop-chain needs heartbeat STALE"},
    {"time": T0 - 60, "side": "B", "operation": "reclaim", "outcome": "done",
     "detail": "launcher 4108: terminated; server 4110: terminated"},
]


def frozen_app(sides: int = 2, **kw) -> tuple[ConsoleApp, FakeBackend]:
    b = FakeBackend(rig=rig_config(sides), audit_records=list(AUDIT))
    stale(b)
    b.plans["reclaim"] = lambda side: kill_plan(b.snaps[side])
    app = ConsoleApp(b, poll=False, **kw)
    return app, b


async def show_all(pilot) -> None:
    app = pilot.app
    for side in app.sides:
        app.show_snapshot(app.backend.snaps[side])
    await pilot.pause(0.2)


def test_main_80x24(snap_compare) -> None:
    app, _ = frozen_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=show_all)


def test_main_120x40(snap_compare) -> None:
    app, _ = frozen_app(sides=3)
    assert snap_compare(app, terminal_size=(120, 40), run_before=show_all)


def test_main_read_only_120x40(snap_compare) -> None:
    app, _ = frozen_app(read_only=True)
    assert snap_compare(app, terminal_size=(120, 40), run_before=show_all)


def test_modal_proceed_disabled_on_unknown(snap_compare) -> None:
    app, b = frozen_app()
    b.plans["reclaim"] = lambda side: with_unknown_evaluator(kill_plan(b.snaps[side]))

    async def before(pilot) -> None:
        await show_all(pilot)
        await pilot.press("x")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(100, 32), run_before=before)


def test_wizard_finished(snap_compare) -> None:
    app, b = frozen_app()
    b.recovery_driver = FakeRecovery(b)

    async def before(pilot) -> None:
        await show_all(pilot)
        await pilot.press("r")
        await pilot.pause(0.3)
        await pilot.press("tab", "tab", "enter")
        await pilot.pause(0.5)

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


def test_help_80x24(snap_compare) -> None:
    """The keys and the state-word table, aligned and whole at 80x24 (issue 17)."""
    app, _ = frozen_app()

    async def before(pilot) -> None:
        await show_all(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_one_side_uses_the_full_width_120x40(snap_compare) -> None:
    app, _ = frozen_app(sides=1)
    assert snap_compare(app, terminal_size=(120, 40), run_before=show_all)
