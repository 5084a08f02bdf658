"""The resource guards and the debugging-run label in the TUI (issue 21), on the fake backend."""
from __future__ import annotations

import dataclasses

from console.tui import app as app_mod
from console.tui.app import ConsoleApp
from tests.tui.fakes import FakeBackend, rig_config, snapshot
from widgets.event_log import EventLog


class ResourceBackend(FakeBackend):
    warnings: list[list[str]]

    async def resources(self, snaps):
        self.calls.append(("resources", tuple(sorted(snaps))))
        return self.warnings.pop(0) if len(self.warnings) > 1 else self.warnings[0]


def notes(app: ConsoleApp) -> list[str]:
    return [strip.text for strip in app.main.query_one(EventLog).lines]


async def test_each_resource_warning_is_noted_once_when_it_appears_and_when_it_clears(monkeypatch) -> None:
    monkeypatch.setattr(app_mod, "RESOURCES_EVERY_S", 0.05)
    disk = "disk CRITICAL local:/data 3 MiB"      # short: the event log crops at its width
    b = ResourceBackend()
    b.warnings = [[disk], [disk], [disk, "memory low on win"], [], []]
    app = ConsoleApp(b, poll=True)
    async with app.run_test(size=(160, 40)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if any("cleared: memory low on win" in n for n in notes(app)):
                break
        got = [n for n in notes(app) if "resources:" in n]
    assert sum(f"resources: {disk}" in n for n in got) == 1, got          # shown once, not every beat
    assert any("resources: memory low on win" in n for n in got)
    assert any(f"resources: cleared: {disk}" in n for n in got), got


async def test_a_debugging_run_says_so_in_its_pane_title() -> None:
    rig = rig_config()
    a = rig.sides["A"]
    dbg = dataclasses.replace(a, evaluator=dataclasses.replace(a.evaluator, args=(*a.evaluator.args, ("debug", "1")),
                                                               debug_run=True))
    rig = dataclasses.replace(rig, sides={**rig.sides, "A": dbg})
    b = FakeBackend(rig=rig, snaps={"A": snapshot(dbg)})
    app = ConsoleApp(b, poll=False)
    async with app.run_test() as pilot:
        app.show_snapshot(b.snaps["A"])
        app.show_snapshot(b.snaps["B"])
        await pilot.pause(0.1)
        assert app.main.pane("A").border_title == "A RUNNING · DEBUGGING RUN"
        assert app.main.pane("B").border_title == "B RUNNING"
