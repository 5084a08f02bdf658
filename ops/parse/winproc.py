"""The Windows process table, as PowerShell's ConvertTo-Json writes it, and Windows command-line splitting.

    Get-CimInstance Win32_Process | Select-Object ProcessId,ParentProcessId,CommandLine,CreationDate
        | ConvertTo-Json

What varies (design.md §4):
- one process comes out as a bare object, several as an array;
- CreationDate is `"\\/Date(1614185732000)\\/"` (ms since the epoch; Windows PowerShell 5.1, maybe with a
  `+0100` suffix that only names the writer's zone), an ISO-8601 string (PowerShell 7, offset and up to 7
  fraction digits), or `{"value": ..., "DisplayHint": 2, "DateTime": "..."}` when the DateTime carries
  extended properties (5.1 and 7 before 7.2); Get-WmiObject would give a DMTF string, accepted too;
- CommandLine is null for other users' processes without elevation. That is kept as None: UNKNOWN, and
  the caller must not read it as "this process has no port marker".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ops.parse.errors import ParseError, as_text

WHAT = "win32_process json"
# ~500 processes with long cmdlines come to ~200 KB; 16 MB is far beyond any real table.
MAX_CHARS = 16_000_000
# The query this parser reads. -InputObject @(...) keeps a one-process answer an array, -Compress keeps
# it small; the parser accepts the plain pipeline form too.
PS_PROCESS_QUERY = ("ConvertTo-Json -Compress -InputObject @(Get-CimInstance Win32_Process | "
                    "Select-Object ProcessId,ParentProcessId,CommandLine,CreationDate)")
_MAX_PID = 2**32 - 1

_MS_DATE = re.compile(r"/Date\((-?[0-9]{1,16})(?:[+-][0-9]{4})?\)/")
_ISO_DATE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]{1,9}))?"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})?", re.IGNORECASE)
_DMTF_DATE = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})\.([0-9]{6})([+-])([0-9]{3})")


@dataclass(frozen=True)
class WinProc:
    pid: int
    ppid: int | None           # None only if the field was null: then the parent is unknown
    cmdline: str | None        # None: not readable (UNKNOWN), not "empty"
    create_time: float | None  # epoch seconds (UTC); None: not given / a pre-1970 sentinel

    @property
    def argv(self) -> tuple[str, ...] | None:
        """The cmdline split as the process's C runtime splits it; None when the cmdline is unknown."""
        return None if self.cmdline is None else tuple(split_windows_cmdline(self.cmdline))


class _Bad(Exception):
    """Internal: one field could not be read. Never leaves this module."""


def parse_win_processes(text: str | bytes, *, allow_empty: bool = False) -> tuple[WinProc, ...] | ParseError:
    """Parse ConvertTo-Json output of Win32_Process rows; never raises.

    Empty output is a ParseError unless `allow_empty` (a filtered query may match nothing): the full
    table always holds at least System, so nothing there means the query did not run.
    """
    checked = as_text(WHAT, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    if not checked.strip():
        return () if allow_empty else ParseError.of(WHAT, "empty output", checked)
    try:
        data = json.loads(checked, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return ParseError.of(WHAT, f"not valid JSON: {exc.msg} at {exc.pos}", checked, exc.pos)
    except (ValueError, RecursionError) as exc:
        return ParseError.of(WHAT, f"not acceptable JSON: {exc}", checked)
    rows = data if isinstance(data, list) else [data]  # one process: a bare object, not an array
    out: list[WinProc] = []
    for pos, row in enumerate(rows):
        try:
            out.append(_proc(row))
        except _Bad as exc:
            return ParseError.of(WHAT, f"process #{pos}: {exc}", json.dumps(row, default=str)[:300])
    if not out and not allow_empty:
        return ParseError.of(WHAT, "an empty array", checked)
    return tuple(out)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a value ConvertTo-Json writes for these fields")


def _proc(row: object) -> WinProc:
    if not isinstance(row, dict):
        raise _Bad(f"is {type(row).__name__}, not an object")
    fields = {str(k).lower(): v for k, v in row.items()}  # PowerShell names are case-insensitive
    if "processid" not in fields:
        raise _Bad("no ProcessId")
    pid = _pid(fields["processid"], "ProcessId")
    ppid_raw = fields.get("parentprocessid")
    ppid = None if ppid_raw is None else _pid(ppid_raw, "ParentProcessId")
    cmdline = fields.get("commandline")
    if cmdline is not None and not isinstance(cmdline, str):
        raise _Bad("CommandLine is not a string or null")
    return WinProc(pid=pid, ppid=ppid, cmdline=cmdline, create_time=_creation_date(fields.get("creationdate")))


def _pid(value: object, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_PID:
        raise _Bad(f"{label} is not a process id: {str(value)[:40]!r}")
    return value


def parse_creation_date(value: object) -> float | None | ParseError:
    """Epoch seconds from one CreationDate value (any form above); None for null or a pre-1970 sentinel.

    An unknown form is a ParseError, not None: every row comes from one serializer, so an unknown form
    means the whole answer is misunderstood, and the caller must hear that rather than get Nones.
    """
    try:
        return _creation_date(value)
    except _Bad as exc:
        return ParseError.of(WHAT, str(exc), json.dumps(value, default=str))


def _creation_date(value: object) -> float | None:
    """parse_creation_date's work; raises _Bad (caught by both callers) for what it cannot read."""
    if value is None:
        return None
    if isinstance(value, dict):
        inner = {str(k).lower(): v for k, v in value.items()}
        if "value" not in inner:
            raise _Bad("a CreationDate object without 'value'")
        if isinstance(inner["value"], dict):
            raise _Bad("a CreationDate object nested in another")
        return _creation_date(inner["value"])
    if not isinstance(value, str):
        raise _Bad(f"CreationDate is {type(value).__name__}")
    seconds = _date_seconds(value.strip())
    # No process started before 1970: DateTime.MinValue and friends mean "not known".
    return seconds if seconds > 0 else None


def _date_seconds(text: str) -> float:
    m = _MS_DATE.fullmatch(text)
    if m:
        # The ms count is UTC whatever the suffix says (the suffix only records the writer's zone).
        return int(m.group(1)) / 1000.0
    m = _ISO_DATE.fullmatch(text)
    if m:
        return _iso_seconds(m)
    m = _DMTF_DATE.fullmatch(text)
    if m:
        return _dmtf_seconds(m)
    raise _Bad(f"CreationDate in an unknown form: {text[:60]!r}")


def _iso_seconds(m: re.Match[str]) -> float:
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    if zone is None:
        # No offset (DateTimeKind.Unspecified): read as UTC. The identity re-check compares two readings
        # of the same process from the same host, so a consistent value is what matters.
        tz = timezone.utc
    elif zone.upper() == "Z":
        tz = timezone.utc
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = _zone(sign * (int(digits[:2]) * 60 + int(digits[2:])))
    base = _datetime(y, mo, d, h, mi, s, tz)
    return base + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _dmtf_seconds(m: re.Match[str]) -> float:
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    minutes = int(m.group(9)) * (-1 if m.group(8) == "-" else 1)
    return _datetime(y, mo, d, h, mi, s, _zone(minutes)) + int(m.group(7)) / 1e6


def _zone(minutes: int) -> timezone:
    if abs(minutes) >= 24 * 60:
        raise _Bad(f"a UTC offset of {minutes} minutes")
    return timezone(timedelta(minutes=minutes))


def _datetime(y: int, mo: int, d: int, h: int, mi: int, s: int, tz: timezone) -> float:
    try:
        return datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp()
    except (ValueError, OverflowError) as exc:
        raise _Bad(f"an impossible date: {exc}") from None


def split_windows_cmdline(cmdline: str) -> list[str]:
    """Split a Windows command line into argv exactly as the Microsoft C runtime does (UCRT rules).

    argv[0] (the program) is special: quotes toggle, backslashes are literal, it ends at the first
    blank outside quotes. Then, for each argument: 2n backslashes before `"` give n backslashes and
    the quote opens/closes a quoted run; 2n+1 backslashes before `"` give n backslashes and a literal
    `"`; backslashes elsewhere are literal; inside a quoted run `""` is a literal `"` and the run goes
    on. (shell32's CommandLineToArgvW differs only on that last point and on argv[0] ending at its
    closing quote; the programs we match — python, CarlaUE4 — use the CRT's rules.)
    Never raises; an empty string gives [].
    """
    if not cmdline:
        return []
    first, pos = _program_name(cmdline)
    args = [first]
    n = len(cmdline)
    while True:
        while pos < n and cmdline[pos] in " \t":
            pos += 1
        if pos >= n:
            return args
        arg, pos = _one_argument(cmdline, pos)
        args.append(arg)


def _program_name(s: str) -> tuple[str, int]:
    out: list[str] = []
    in_quotes = False
    pos = 0
    while pos < len(s):
        ch = s[pos]
        if ch == '"':
            in_quotes = not in_quotes
        elif ch in " \t" and not in_quotes:
            break
        else:
            out.append(ch)
        pos += 1
    return "".join(out), pos


def _one_argument(s: str, pos: int) -> tuple[str, int]:
    out: list[str] = []
    in_quotes = False
    n = len(s)
    while pos < n:
        slashes = 0
        while pos < n and s[pos] == "\\":
            slashes += 1
            pos += 1
        if pos < n and s[pos] == '"':
            out.append("\\" * (slashes // 2))
            if slashes % 2:
                out.append('"')            # 2n+1 backslashes: an escaped, literal quote
            elif in_quotes and pos + 1 < n and s[pos + 1] == '"':
                out.append('"')            # "" inside a quoted run: a literal quote, still quoted
                pos += 1
            else:
                in_quotes = not in_quotes  # 2n backslashes: the quote delimits
            pos += 1
            continue
        out.append("\\" * slashes)          # backslashes not before a quote are literal
        if pos >= n or (not in_quotes and s[pos] in " \t"):
            break
        out.append(s[pos])
        pos += 1
    return "".join(out), pos
