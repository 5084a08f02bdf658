"""`nvidia-smi --query-gpu / --query-compute-apps` CSV, as the tests read it.

The console reads neither (ops/parse/nvsmi.py reads `-q -x`, which lists graphics-only processes too). The
tests read the sim's fake nvidia-smi and the recorded fixtures with this, to show what the CSV says: a
graphics-only (G) process is missing from `--query-compute-apps` (issue 22).

Both the `csv,noheader,nounits` form (QUERY_*_ARGS) and the header/units forms are read. A placeholder
(`[N/A]`, `[Not Supported]`, a bare `N/A`) is None, never 0; any other line that cannot be read makes the
whole output a ParseError.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ops.parse.errors import ParseError, as_text
from ops.parse.nvsmi import _INT, _MIB, _Bad  # the XML parser's own field rules

T = TypeVar("T")

QUERY_GPU_ARGS = ("--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits")
QUERY_APPS_ARGS = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")

WHAT_GPU = "nvidia-smi query-gpu"
WHAT_APPS = "nvidia-smi query-compute-apps"
# One line per GPU or process: even a 1,000-process box prints well under 100 KB.
MAX_CHARS = 1_000_000

# A placeholder may still carry the unit when the header form is used ("[N/A] MiB" on some drivers).
_UNKNOWN = re.compile(r"(?:\[[^\]]*\]|N/A)(?:[ \t]*(?:MiB|MB))?", re.IGNORECASE)


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    used_mb: int | None   # None: nvidia-smi could not read it (unknown, not zero)
    total_mb: int | None


@dataclass(frozen=True)
class AppReading:
    pid: int
    used_mb: int | None              # None: unreadable (e.g. per-process memory under Windows WDDM)
    process_name: str | None = None  # only with --query-compute-apps=pid,process_name,used_memory


def parse_query_gpu(text: str | bytes) -> tuple[GpuReading, ...] | ParseError:
    """Parse `--query-gpu=index,name,memory.used,memory.total` CSV; never raises.

    Empty output is a ParseError: nvidia-smi prints a message and no CSV when it finds no GPU or no
    driver, so "no line" cannot mean "no GPU, nothing used".
    """
    out = _lines_of(WHAT_GPU, text, "index", _gpu_line, empty="no GPU line in the output")
    if isinstance(out, ParseError):
        return out
    indexes = [g.index for g in out]
    if len(set(indexes)) != len(indexes):
        return ParseError.of(WHAT_GPU, "the same GPU index twice", "\n".join(str(g) for g in out))
    return out


def parse_compute_apps(text: str | bytes) -> tuple[AppReading, ...] | ParseError:
    """Parse `--query-compute-apps=pid,used_memory` (or pid,process_name,used_memory); never raises.

    Empty output and a header alone both mean "no compute process" (nvidia-smi exits 0 with nothing),
    so the caller must have checked the exit status first: empty stdout from a failed run is not that.
    """
    return _lines_of(WHAT_APPS, text, "pid", _app_line, empty=None)


def _lines_of(what: str, text: str | bytes, header_first_field: str, read: Callable[[str], T],
              empty: str | None) -> tuple[T, ...] | ParseError:
    """Every data line read by `read`; the first line it cannot read makes the whole output a ParseError.
    empty: the error for an output with no data line (None: no line is a valid answer)."""
    checked = as_text(what, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    rows = _data_lines(what, checked, header_first_field=header_first_field)
    if isinstance(rows, ParseError):
        return rows
    if not rows and empty is not None:
        return ParseError.of(what, empty, checked)
    out: list[T] = []
    for line in rows:
        try:
            out.append(read(line))
        except _Bad as exc:
            return ParseError.of(what, str(exc), line)
    return tuple(out)


def _data_lines(what: str, text: str, header_first_field: str) -> list[str] | ParseError:
    """The non-blank lines, without a leading CSV header; a header anywhere else is refused."""
    lines = [line.strip() for line in text.replace("\x00", "").splitlines()]
    lines = [line for line in lines if line]
    if lines and _is_header(lines[0], header_first_field):
        lines = lines[1:]
    for line in lines:
        if _is_header(line, header_first_field):
            return ParseError.of(what, "a header line in the middle of the data", line)
    return lines


def _is_header(line: str, first_name: str) -> bool:
    """`index, name, ...` / `pid, used_gpu_memory [MiB]`: the column name first, no number last."""
    first, _, rest = line.partition(",")
    last = rest.rsplit(",", 1)[-1].strip()
    return first.strip().lower() == first_name and not (_INT.fullmatch(last) or _MIB.fullmatch(last))


def _gpu_line(line: str) -> GpuReading:
    first, mid, used, total = _split4(line)
    # A name with a comma must not shift the memory columns: index first, memory last, name between.
    if not mid:
        raise _Bad("empty GPU name")
    return GpuReading(index=_index(first, "index"), name=mid,
                      used_mb=_mib(used, "memory.used"), total_mb=_mib(total, "memory.total"))


def _split4(line: str) -> tuple[str, str, str, str]:
    """(first field, middle, next-to-last, last), stripped; the middle keeps its inner commas."""
    if line.count(",") < 3:
        raise _Bad(f"expected 4 fields (index, name, used, total), got {line.count(',') + 1}")
    first, rest = line.split(",", 1)
    mid, used, total = rest.rsplit(",", 2)
    return first.strip(), mid.strip(), used.strip(), total.strip()


def _app_line(line: str) -> AppReading:
    if "," not in line:
        raise _Bad("expected pid and used memory, got 1 field")
    first, rest = line.split(",", 1)
    name: str | None = None
    if "," in rest:
        # pid,process_name,used_memory: the name is the middle; Windows paths may hold commas.
        raw_name, rest = rest.rsplit(",", 1)
        name = raw_name.strip()
    return AppReading(pid=_index(first.strip(), "pid"), used_mb=_mib(rest.strip(), "used_memory"),
                      process_name=name)


def _index(field: str, label: str) -> int:
    if not _INT.fullmatch(field):
        raise _Bad(f"{label} is not a non-negative integer: {field[:40]!r}")
    return int(field)


def _mib(field: str, label: str) -> int | None:
    if _UNKNOWN.fullmatch(field):
        return None
    if _INT.fullmatch(field):
        return int(field)
    m = _MIB.fullmatch(field)
    if m:
        return int(m.group(1))
    raise _Bad(f"{label} is not a MiB count: {field[:40]!r}")
