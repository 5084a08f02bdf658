"""The footer keeps its key widgets across focus changes, and rebuilds when the keys it shows change."""
from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from console.tui.app import ConsoleApp
from tests.tui.fakes import FakeBackend
from widgets.key_footer import KeyFooter


def key_widgets(footer: KeyFooter) -> list:
    return list(footer.children)


def shown_keys(footer: KeyFooter) -> set[str]:
    return {k.key for k in footer.children if hasattr(k, "key")}


async def test_tab_between_sides_keeps_the_footer() -> None:
    app = ConsoleApp(FakeBackend(), poll=False)
    async with app.run_test() as pilot:
        await pilot.pause(0.2)
        footer = app.main.query_one(KeyFooter)
        before = key_widgets(footer)
        assert {"g", "p", "a", "l", "r", "x", "q"} <= shown_keys(footer)
        for _ in range(3):
            await pilot.press("tab")
            await pilot.pause(0.1)
        assert app.focused is app.main.pane("B")
        assert key_widgets(footer) == before          # the same widgets: not unmounted and mounted again


class Box(Static, can_focus=True):
    def __init__(self, bindings: list[Binding], **kw) -> None:
        super().__init__("box", **kw)
        for b in bindings:
            self._bindings.bind(b.key, b.action, b.description)


class TwoBoxes(App[None]):
    def compose(self) -> ComposeResult:
        yield Box([], id="plain")
        yield Box([Binding("z", "zap", "Zap")], id="zapper")
        yield KeyFooter()


async def test_the_footer_follows_keys_that_come_with_focus() -> None:
    app = TwoBoxes()
    async with app.run_test() as pilot:
        app.query_one("#plain").focus()
        await pilot.pause(0.1)
        footer = app.query_one(KeyFooter)
        assert "z" not in shown_keys(footer)
        app.query_one("#zapper").focus()
        await pilot.pause(0.1)
        assert "z" in shown_keys(footer)
        app.query_one("#plain").focus()
        await pilot.pause(0.1)
        assert "z" not in shown_keys(footer)
