"""widgets/plain_lines.py gives exactly the strips Textual's own text pipeline gives, wherever it is used."""
from __future__ import annotations

import random
import string
from dataclasses import replace

from textual.widget import Widget

from tests.tui.fakes import shown
from widgets.plain_lines import PlainLines
from widgets.side_parts import LogTail


def _both(log: LogTail) -> tuple[list, list]:
    """(this module's strips, Textual's strips) for the log tail as it is now."""
    assert log._plain_lines() is not None, "the fast path must be taken for this case"
    PlainLines._render_content(log)
    ours = [(list(s), s.cell_length) for s in log._render_cache.lines]
    Widget._render_content(log)
    theirs = [(list(s), s.cell_length) for s in log._render_cache.lines]
    return ours, theirs


CASES = [
    ("short line",),
    ("x" * 54, "y" * 55, "z" * 56),                      # around the width: fits, fits exactly, cut
    ("  leading and inner   spaces", "trailing spaces   ", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    ("[RouteScenario_26405_rep0] step 3 game_time=0.17s route 3/40 speed 4.2 throttle 0.51",) * 3,
    ("a", "b", "c"),
    (),                                                  # "log    (no lines)"
]


async def test_the_same_strips_as_textual_plain_greyed_and_focused() -> None:
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        pane = app.main.pane("A")
        log = pane.query_one(LogTail)
        for state in ("plain", "greyed", "focused", "narrow"):
            if state == "greyed":
                pane.greyed = "poll timed out"
            elif state == "focused":
                pane.greyed = None
                pane.focus()
            elif state == "narrow":
                await pilot.resize_terminal(50, 30)
            for lines in CASES:
                app.show_snapshot(replace(snap, log_tail=lines))
                await pilot.pause(0.05)
                ours, theirs = _both(log)
                assert ours == theirs, (state, lines)


async def test_the_same_strips_as_textual_for_random_printable_ascii() -> None:
    rnd = random.Random(7)
    alphabet = string.printable.strip() + "    "
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        log = app.main.pane("A").query_one(LogTail)
        for _ in range(150):
            lines = tuple("".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 90))).rstrip() or "x"
                          for _ in range(rnd.randint(1, 3)))
            app.show_snapshot(replace(snap, log_tail=lines))
            await pilot.pause(0)
            if log.size.height != len(lines):
                await pilot.pause(0.05)    # the height follows the number of lines after a layout
            ours, theirs = _both(log)
            assert ours == theirs, lines


async def test_anything_else_goes_to_textual() -> None:
    async with shown() as (app, pilot, b):
        snap = b.snaps["A"]
        log = app.main.pane("A").query_one(LogTail)
        for lines in (("wide 日本語 text",), ("an empty row follows", ""), ("combining é",), ("a\ttab",)):
            app.show_snapshot(replace(snap, log_tail=lines))
            await pilot.pause(0.05)
            assert log._plain_lines() is None, lines
            assert log.render_lines(log.size.region)          # Textual renders it
