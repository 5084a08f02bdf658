"""`nvidia-smi --query-gpu / --query-compute-apps` CSV and `nvidia-smi -q -x` XML: the VRAM evidence.

The GPUs' memory comes from `--query-gpu`; per-process memory from the XML, because it lists every
process with its type, graphics-only (G) ones included, which `--query-compute-apps` leaves out.

We ask for `csv,noheader,nounits` (QUERY_*_ARGS below) but also read the header/units forms, because an
operator may paste either and other tools wrap nvidia-smi with the default `--format=csv`.

A field nvidia-smi cannot read is printed as a bracketed placeholder (`[N/A]`, `[Not Supported]`,
`[Unknown Error]`, `[Insufficient Permissions]`, ...) or a bare `N/A`: that is None (unknown), never 0,
because a 0 would read as "the server did not allocate" and send adapter polling to the next GPU.
Any other line that cannot be read makes the whole output a ParseError: half-trusting a garbled
reading is how the wrong GPU gets blamed.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from ops.parse.errors import ParseError, as_text

QUERY_GPU_ARGS = ("--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits")
QUERY_APPS_ARGS = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")

WHAT_GPU = "nvidia-smi query-gpu"
WHAT_APPS = "nvidia-smi query-compute-apps"
# One line per GPU or process: even a 1,000-process box prints well under 100 KB.
MAX_CHARS = 1_000_000

_INT = re.compile(r"[0-9]{1,12}")
# The unit nvidia-smi appends without `nounits`; any other unit (GiB, KiB) would be misread, so refuse it.
_MIB = re.compile(r"([0-9]{1,12})[ \t]*(?:MiB|MB)", re.IGNORECASE)
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


class _Bad(Exception):
    """Internal: one field or line could not be read. Never leaves this module."""


def parse_query_gpu(text: str | bytes) -> tuple[GpuReading, ...] | ParseError:
    """Parse `--query-gpu=index,name,memory.used,memory.total` CSV; never raises.

    Empty output is a ParseError: nvidia-smi prints a message and no CSV when it finds no GPU or no
    driver, so "no line" cannot mean "no GPU, nothing used".
    """
    checked = as_text(WHAT_GPU, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    rows = _data_lines(WHAT_GPU, checked, header_first_field="index")
    if isinstance(rows, ParseError):
        return rows
    if not rows:
        return ParseError.of(WHAT_GPU, "no GPU line in the output", checked)
    out: list[GpuReading] = []
    for line in rows:
        try:
            out.append(_gpu_line(line))
        except _Bad as exc:
            return ParseError.of(WHAT_GPU, str(exc), line)
    indexes = [g.index for g in out]
    if len(set(indexes)) != len(indexes):
        return ParseError.of(WHAT_GPU, "the same GPU index twice", "\n".join(rows))
    return tuple(out)


def parse_compute_apps(text: str | bytes) -> tuple[AppReading, ...] | ParseError:
    """Parse `--query-compute-apps=pid,used_memory` (or pid,process_name,used_memory); never raises.

    Empty output and a header alone both mean "no compute process" (nvidia-smi exits 0 with nothing),
    so the caller must have checked the exit status first: empty stdout from a failed run is not that.
    """
    checked = as_text(WHAT_APPS, text, MAX_CHARS)
    if isinstance(checked, ParseError):
        return checked
    rows = _data_lines(WHAT_APPS, checked, header_first_field="pid")
    if isinstance(rows, ParseError):
        return rows
    out: list[AppReading] = []
    for line in rows:
        try:
            out.append(_app_line(line))
        except _Bad as exc:
            return ParseError.of(WHAT_APPS, str(exc), line)
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


# ------------------------------------------------------------------------------- nvidia-smi -q -x (XML)

# Every process on every GPU with its type: C (compute), G (graphics), C+G (both; a Vulkan renderer such
# as a CARLA server, measured on an H200), M/M+C (MPS). `--query-compute-apps` leaves the G ones out, so
# the per-process VRAM of the nvidia-smi path comes from here. (`-d` cannot be combined with `-x`: driver
# 580 refuses it, so the whole query it is: ~27 KB and ~100 ms per H200, measured.)
QUERY_XML_ARGS = ("-q", "-x")
WHAT_XML = "nvidia-smi -q -x"
# ~27 KB per GPU measured; 16 GPUs with a few thousand processes stay far below this.
MAX_XML_CHARS = 8_000_000
_PROC_TYPE = re.compile(r"[A-Z](?:\+[A-Z]){0,3}")
# `N/A`, `Not Supported`, `[N/A]`, `Insufficient Permissions`, ...: words, no digit.
_XML_UNKNOWN = re.compile(r"\[?[A-Za-z][A-Za-z /]*\]?")


@dataclass(frozen=True)
class XmlProcess:
    pid: int
    type: str                        # "C", "G", "C+G", "M", "M+C" as nvidia-smi prints it
    used_mb: int | None              # None: unreadable (`N/A`, e.g. under Windows WDDM)
    process_name: str | None = None
    instance: tuple[int | None, int | None] = (None, None)   # (GPU instance, compute instance) under MIG


@dataclass(frozen=True)
class XmlGpu:
    index: int                       # the <gpu> element's position = nvidia-smi's index (both enumerate the same way)
    bus_id: str
    name: str | None
    uuid: str | None
    used_mb: int | None
    total_mb: int | None
    processes: tuple[XmlProcess, ...] | None   # None: the driver cannot list them (`N/A`), not "none"


@dataclass(frozen=True)
class SmiLog:
    driver_version: str | None
    gpus: tuple[XmlGpu, ...]


def parse_query_xml(text: str | bytes) -> SmiLog | ParseError:
    """Parse `nvidia-smi -q -x`; never raises. Only what the VRAM probe needs is read: each GPU's name,
    uuid, framebuffer used/total and its processes (pid, type, used memory)."""
    checked = as_text(WHAT_XML, text, MAX_XML_CHARS)
    if isinstance(checked, ParseError):
        return checked
    # nvidia-smi never declares entities; refusing them keeps expat's entity expansion out of play.
    if "<!ENTITY" in checked:
        return ParseError.of(WHAT_XML, "an entity declaration (nvidia-smi writes none)", checked,
                             at=checked.find("<!ENTITY"))
    try:
        root = ET.fromstring(checked.replace("\x00", ""))
    except ET.ParseError as exc:
        return ParseError.of(WHAT_XML, f"not well-formed XML: {exc}", checked)
    except ValueError as exc:   # a str with lone surrogates cannot reach expat (UnicodeEncodeError)
        return ParseError.of(WHAT_XML, f"not encodable text: {exc}", checked)
    if root.tag != "nvidia_smi_log":
        return ParseError.of(WHAT_XML, f"root element is <{root.tag}>, not <nvidia_smi_log>", checked[:200])
    try:
        gpus = tuple(_xml_gpu(i, g) for i, g in enumerate(root.findall("gpu")))
    except _Bad as exc:
        return ParseError.of(WHAT_XML, str(exc), checked[:200])
    attached = _text(root, "attached_gpus")
    # More attached than listed is `-i` selecting some; fewer means the log is not what it says.
    if attached is not None and (not _INT.fullmatch(attached) or int(attached) < len(gpus)):
        return ParseError.of(WHAT_XML, f"attached_gpus says {attached}, the log has {len(gpus)} <gpu>", checked[:200])
    if not gpus:
        return ParseError.of(WHAT_XML, "no <gpu> element", checked[:200])
    return SmiLog(driver_version=_text(root, "driver_version"), gpus=gpus)


def _text(el: ET.Element, path: str) -> str | None:
    found = el.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _xml_gpu(index: int, g: ET.Element) -> XmlGpu:
    fb = g.find("fb_memory_usage")
    used = _xml_mib(_text(fb, "used"), "fb_memory_usage/used") if fb is not None else None
    total = _xml_mib(_text(fb, "total"), "fb_memory_usage/total") if fb is not None else None
    procs_el = g.find("processes")
    processes: tuple[XmlProcess, ...] | None
    if procs_el is None:
        processes = None          # an older or filtered log without the section: unknown, not empty
    else:
        infos = procs_el.findall("process_info")
        note = (procs_el.text or "").strip()
        if not infos and note:
            processes = None      # `<processes>N/A</processes>`: the driver cannot list them
        else:
            processes = tuple(_xml_process(p) for p in infos)
    return XmlGpu(index=index, bus_id=g.get("id", ""), name=_text(g, "product_name"), uuid=_text(g, "uuid"),
                  used_mb=used, total_mb=total, processes=processes)


def _xml_process(p: ET.Element) -> XmlProcess:
    pid = _text(p, "pid")
    if pid is None or not _INT.fullmatch(pid):
        raise _Bad(f"process pid is not a non-negative integer: {(pid or '')[:40]!r}")
    kind = _text(p, "type")
    if kind is None or not _PROC_TYPE.fullmatch(kind):
        raise _Bad(f"process {pid}: type is not C, G, C+G, M...: {(kind or '')[:40]!r}")
    return XmlProcess(pid=int(pid), type=kind, used_mb=_xml_mib(_text(p, "used_memory"), f"process {pid} used_memory"),
                      process_name=_text(p, "process_name"),
                      instance=(_opt_int(_text(p, "gpu_instance_id")), _opt_int(_text(p, "compute_instance_id"))))


def _opt_int(field: str | None) -> int | None:
    return int(field) if field is not None and _INT.fullmatch(field) else None


def _xml_mib(field: str | None, label: str) -> int | None:
    if field is None or _XML_UNKNOWN.fullmatch(field):
        return None
    m = _MIB.fullmatch(field)
    if m:
        return int(m.group(1))
    raise _Bad(f"{label} is not a MiB count: {field[:40]!r}")
