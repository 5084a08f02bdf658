"""State words and bars shared by every widget.

A state is always shown as its word first and its colour second: on TERM=linux (16 colours), over a
colour-blind eye or in a `tmux capture-pane` text dump the word alone must carry the meaning.
"""
from __future__ import annotations

import re

from rich.text import Text

# Named ANSI colours (not theme hex values): they survive the downgrade to 16 colours unchanged.
WORD_STYLE: dict[str, str] = {
    "ALIVE": "bold green", "FRESH": "bold green", "ok": "green", "OK": "green", "reachable": "green",
    "running": "green", "CLEAR": "green",
    "DEAD": "bold red", "STALE": "bold red", "IN USE": "bold red", "RESERVED": "bold red", "SHARED": "bold red",
    "UNREACHABLE": "bold red", "failed": "bold red", "refused": "bold red", "crashed": "bold red",
    "HUNG": "bold red", "RUNNING": "bold green", "STARTING": "yellow", "FINISHED": "cyan", "STOPPED": "yellow",
    "GAVE_UP": "bold red", "OFF": "dim",
    "UNKNOWN": "bold yellow", "NOT_STARTED": "yellow", "IDLE": "bold magenta", "restarting": "yellow", "starting": "yellow",
    "finished": "cyan", "absent": "dim", "stopped": "yellow",
    "done": "bold green", "incomplete": "bold red", "error": "bold red", "cancelled": "yellow",
    "NONE": "green", "READ": "green", "OURS": "green", "ABSENT": "green", "needs a human": "bold red",
}


def word(text: str, style: str | None = None) -> Text:
    """A state word in its colour (unknown words are plain, never hidden)."""
    return Text(text, style=style if style is not None else WORD_STYLE.get(text, ""))


def bar(fraction: float | None, width: int) -> str:
    """A text bar of `width` cells; None (unknown) is a row of '?' so it never reads as empty or full."""
    if width <= 0:
        return ""
    if fraction is None:
        return "?" * width
    fraction = min(max(fraction, 0.0), 1.0)
    full = round(fraction * width)
    return "█" * full + "░" * (width - full)


def duration(seconds: float | None) -> str:
    """Compact age: 42s, 7m05s, 3h12m, 2d04h; None is '?'."""
    if seconds is None:
        return "?"
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def uptime(seconds: float | None) -> str:
    """A process's age, to the minute (<1m, 7m, 3h12m, 2d04h). Seconds of a server's uptime tell an
    operator nothing the ALIVE word and the heartbeat do not, and a line that changes every second
    repaints every second."""
    if seconds is not None and 0 <= seconds < 60:
        return "<1m"
    if seconds is not None and seconds < 3600:
        return f"{int(seconds) // 60}m"
    return duration(seconds)


def mib(v: int | None) -> str:
    return "?" if v is None else f"{v}"


_CLI_ADAPTER = re.compile(r"\(?`?carla-console(?: -c \S+)? adapter [^\s`,)]+`?(, then `launch [^\s`]+`)?\)?")
_CLI_LAUNCH = re.compile(r"`?carla-console(?: -c \S+)? launch [^\s`,)]+`?")


def keys_for_cli(text: str) -> str:
    """ops words its advice for the command line (`carla-console -c RIG adapter A`); on the screen the
    operator is one key away from the same step: say the key."""
    def adapter(m: re.Match[str]) -> str:
        then = ", then l (launch)" if m.group(1) else ""
        return f"(key a: adapter polling{then})" if m.group(0).startswith("(") else f"key a (adapter polling){then}"
    return _CLI_LAUNCH.sub("key l (launch)", _CLI_ADAPTER.sub(adapter, text))
