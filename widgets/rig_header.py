"""The top line: which rig this is, each host's reachability as a word, and the console's mode."""
from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from widgets.words import word


class RigHeader(Widget):
    rig_name: reactive[str] = reactive("")
    # host -> 'reachable' | 'UNREACHABLE' | 'UNKNOWN' (not probed yet or its poll timed out).
    hosts: reactive[dict[str, str]] = reactive(dict)
    read_only: reactive[bool] = reactive(False)

    def render(self) -> Text:
        t = Text("carla-console", style="bold")
        t.append(f"  rig {self.rig_name}")
        if self.hosts:
            t.append("  hosts")
        for name, state in self.hosts.items():
            t.append(f" {name} ")
            t.append_text(word(state))
        if self.read_only:
            t.append("  ")
            t.append("READ-ONLY", style="bold reverse")
        return t
