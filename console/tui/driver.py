"""Textual's Linux driver, with an input thread that sleeps while the operator is away.

Textual's input thread wakes ten times a second whether or not a key came (`select(0.1)`), to notice its
exit flag and to time out a lone ESC. On this project's 2-core VMs that loop alone costs 0.17 % of a core:
a sixth of the whole idle console. Here the thread blocks until input arrives or the driver stops (a
self-pipe written by the exit flag itself), and ticks at Textual's 0.1 s only for a while after input,
when the parser may be waiting out an escape sequence.

The loop is Textual 8.2.8's `LinuxDriver.run_input_thread` with those two changes; textual is pinned, and
tests/tui/test_driver.py runs it in a real pty.
"""
from __future__ import annotations

import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual import constants
from textual._loop import loop_last
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

TICK_S = 0.1                               # Textual's tick, while a parser timeout may be pending
AWAKE_S = constants.ESCAPE_DELAY + 1.0     # how long after input the thread keeps ticking


class WakingEvent(threading.Event):
    """The driver's exit flag: setting it also wakes the input thread out of its select."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()   # the fd is closed by the input thread: never write to a reused fd
        self._wake_fd: int | None = None

    def attach(self, fd: int | None) -> None:
        with self._lock:
            self._wake_fd = fd

    def set(self) -> None:
        super().set()
        with self._lock:
            if self._wake_fd is not None:
                try:
                    os.write(self._wake_fd, b"!")
                except OSError:   # full (a wake is already pending) or gone: nothing to add
                    pass


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = WakingEvent()

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events."""
        exit_event = self.exit_event
        assert isinstance(exit_event, WakingEvent)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        exit_event.attach(wake_w)

        fileno = self.fileno
        EVENT_READ = selectors.EVENT_READ

        parser = XTermParser(self._debug)
        feed = parser.feed
        tick = parser.tick

        decode = getincrementaldecoder("utf-8")().decode
        read = os.read
        awake_until = 0.0

        def process_selector_events(selector_events: list[tuple[selectors.SelectorKey, int]],
                                    final: bool = False) -> None:
            nonlocal awake_until
            for last, (selector_key, mask) in loop_last(selector_events):
                if selector_key.fd == wake_r:
                    read(wake_r, 64)
                    continue
                if mask & EVENT_READ:
                    awake_until = time.monotonic() + AWAKE_S
                    unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:
                        # This can occur if the stdin is piped
                        break
                    for event in feed(unicode_data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        try:
            while not exit_event.is_set():
                timeout = TICK_S if time.monotonic() < awake_until else None
                process_selector_events(selector.select(timeout))
            selector.unregister(self.fileno)
            process_selector_events(selector.select(TICK_S), final=True)
        finally:
            exit_event.attach(None)
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
            try:
                for _event in feed(""):
                    pass
            except (EOFError, ParseError):
                pass
