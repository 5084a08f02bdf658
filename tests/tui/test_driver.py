"""The quiet input thread (console/tui/driver.py) on a real pty: keys and a lone ESC still arrive, it blocks
while nothing comes, and setting the exit flag ends it at once."""
from __future__ import annotations

import asyncio
import os
import selectors
import threading
import time
import tty
from typing import Any

import pytest
import textual
from textual import events

from console.tui import driver as quiet
from console.tui.app import ConsoleApp
from tests.tui.fakes import FakeBackend


class Recording(quiet.QuietLinuxDriver):
    def __init__(self) -> None:
        super().__init__(app=None)  # type: ignore[arg-type]
        self.got: list[Any] = []
        self.arrived = threading.Condition()

    def process_message(self, message: Any) -> None:
        with self.arrived:
            self.got.append(message)
            self.arrived.notify_all()

    def keys(self) -> list[str]:
        return [m.key for m in self.got if isinstance(m, events.Key)]

    def wait_for(self, key: str, timeout: float = 10.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: key in self.keys(), timeout), self.keys()


class CountingSelector(selectors.SelectSelector):
    timeouts: list[float | None] = []

    def select(self, timeout: float | None = None):
        CountingSelector.timeouts.append(timeout)
        return super().select(timeout)


@pytest.fixture
def running(monkeypatch):
    monkeypatch.setattr(quiet.selectors, "SelectSelector", CountingSelector)
    CountingSelector.timeouts = []
    master, slave = os.openpty()
    tty.setraw(slave)     # as Textual's application mode leaves the terminal: bytes, not lines

    async def made() -> Recording:   # a Driver notes the running loop; messages here never go to it
        return Recording()
    d = asyncio.run(made())
    d.fileno = slave
    thread = threading.Thread(target=d.run_input_thread, name="test-input")
    thread.start()
    try:
        yield d, master, thread
    finally:
        d.exit_event.set()
        thread.join(10)
        os.close(master)
        os.close(slave)


def test_textual_is_the_version_the_loop_was_copied_from() -> None:
    assert textual.__version__ == "8.2.8", "re-copy LinuxDriver.run_input_thread into console/tui/driver.py"


def test_keys_and_a_lone_escape_arrive(running) -> None:
    d, master, _ = running
    os.write(master, b"g")
    d.wait_for("g")
    os.write(master, b"\x1b")       # only the parser's timeout makes this a key: the thread must tick
    d.wait_for("escape")


def test_it_blocks_while_nothing_comes_and_the_exit_flag_ends_it(running) -> None:
    d, master, thread = running
    os.write(master, b"q")
    d.wait_for("q")
    time.sleep(quiet.AWAKE_S + 0.3)          # the ticking after input is over
    before = len(CountingSelector.timeouts)
    time.sleep(0.5)
    assert CountingSelector.timeouts[-1] is None
    assert len(CountingSelector.timeouts) == before, "the idle thread woke up"
    d.exit_event.set()
    thread.join(5)
    assert not thread.is_alive()


def test_the_app_uses_it_where_textual_would_use_its_linux_driver(monkeypatch) -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    assert app.driver_class is quiet.QuietLinuxDriver
    monkeypatch.setattr(textual.constants, "DRIVER", "textual.drivers.headless_driver:HeadlessDriver")
    assert ConsoleApp(FakeBackend(), poll=False).driver_class.__name__ == "HeadlessDriver"
