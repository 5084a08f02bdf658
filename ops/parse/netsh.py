"""`netsh int ipv4 show excludedportrange protocol=tcp`: the TCP port ranges winNAT/Hyper-V reserved.

A bind into one of these crashes CarlaUE4 (0xe06d7363), so every launch is preceded by this scan.
The output (English; other languages translate every word but keep the layout):

    Protocol tcp Port Exclusion Ranges

    Start Port    End Port
    ----------    --------
            80          80
         55679       55679     *

    * - Administered port exclusions.

Nothing here relies on a word: the table starts after the dashed separator line and a row is two
integers with an optional trailing `*` (administered). A line after the separator that holds digits
but is not such a row, or a row that is impossible (start > end, a port outside 1..65535), is kept in
`unparsed` so the caller can show it; it is never silently dropped and never a crash.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ops.parse.errors import ParseError, as_text

WHAT = "netsh excludedportrange"
# Real outputs are well under 10 KB; 1 MB leaves room for anything netsh could print.
MAX_CHARS = 1_000_000
MAX_PORT = 65535

# ASCII digits only: str.isdigit()/\d accept other scripts' digits, which int() would then read.
# {1,10} keeps int() cheap and out of CPython's long-digit-string limit.
_ROW = re.compile(r"[ \t]*([0-9]{1,10})[ \t]+([0-9]{1,10})[ \t]*(\*?)[ \t]*")
# Two or more dashes, optionally in several groups separated by blanks ("----------    --------").
_SEPARATOR = re.compile(r"[ \t]*-{2,}(?:[ \t]+-{2,})*[ \t]*")
# "Looks like data" is judged with any script's digits (\d), so an odd row is reported, not ignored.
_HAS_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class ExclusionRange:
    start: int
    end: int
    administered: bool  # the row's trailing `*`: added by an administrator (netsh add), not by winNAT

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.start <= port <= self.end


@dataclass(frozen=True)
class ExclusionTable:
    ranges: tuple[ExclusionRange, ...]
    unparsed: tuple[str, ...] = ()  # lines that looked like data but could not be read: report them
    separator_found: bool = True    # False: rows were read from an output without the dashed line

    def find(self, port: int) -> ExclusionRange | None:
        """The first range that excludes `port`, or None."""
        for rng in self.ranges:
            if port in rng:
                return rng
        return None


def parse_excluded_ranges(text: str | bytes) -> ExclusionTable | ParseError:
    """Parse the whole stdout of the netsh command; never raises."""
    checked = as_text(WHAT, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    lines = _lines(checked)
    sep = next((i for i, line in enumerate(lines) if _SEPARATOR.fullmatch(line)), None)
    if sep is None:
        return _without_separator(checked, lines)
    ranges, unparsed = _read_rows(lines[sep + 1:])
    return ExclusionTable(ranges=tuple(ranges), unparsed=tuple(unparsed))


def _lines(text: str) -> list[str]:
    # NULs appear when UTF-16 output (PowerShell's default pipe encoding) is read as an 8-bit code
    # page; dropping them recovers the ASCII digits instead of failing the whole scan. BOMs may also
    # start any concatenated chunk, not only the text.
    cleaned = text.replace("\x00", "").replace("\ufeff", "")
    return [line.rstrip() for line in cleaned.splitlines()]


def _read_rows(lines: list[str]) -> tuple[list[ExclusionRange], list[str]]:
    ranges: list[ExclusionRange] = []
    unparsed: list[str] = []
    for line in lines:
        if not line.strip() or _SEPARATOR.fullmatch(line):
            continue  # blank, or the separator of a second table in a concatenated output
        m = _ROW.fullmatch(line)
        if m:
            rng = _make_range(int(m.group(1)), int(m.group(2)), m.group(3) == "*")
            if rng is not None:
                ranges.append(rng)
                continue
            unparsed.append(line[:200])
        elif line.lstrip().startswith("*"):
            continue  # the footer "* - Administered port exclusions." in any language
        elif _HAS_DIGIT.search(line):
            unparsed.append(line[:200])
        # else: words only (a localized "Ok.", a repeated header): nothing to read
    return ranges, unparsed


def _make_range(start: int, end: int, administered: bool) -> ExclusionRange | None:
    if not (1 <= start <= end <= MAX_PORT):
        return None
    return ExclusionRange(start=start, end=end, administered=administered)


def _without_separator(text: str, lines: list[str]) -> ExclusionTable | ParseError:
    """No dashed line: an error message ("requires elevation"), empty output, or a mangled table.

    Rows that are unmistakably rows are still read (a scan that saw exclusions should report them), but
    a text with no row at all is not "no exclusions": it is a failed scan, and it blocks launches.
    """
    ranges, unparsed = _read_rows(lines)
    if not ranges:
        reason = "empty output" if not text.strip() else "no dashed separator line and no port rows"
        return ParseError.of(WHAT, reason, text)
    return ExclusionTable(ranges=tuple(ranges), unparsed=tuple(unparsed), separator_found=False)
