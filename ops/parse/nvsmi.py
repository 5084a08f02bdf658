"""`nvidia-smi -q -x` XML: the VRAM evidence of the nvidia-smi path.

One call gives every GPU's memory and every process on it with its type, graphics-only (G) ones included,
which `--query-compute-apps` leaves out (issue 22). The CSV queries are read by no part of the console.

A field nvidia-smi cannot read is printed as a placeholder (`N/A`, `Not Supported`, `[N/A]`, ...): that
is None (unknown), never 0, because a 0 would read as "the server did not allocate" and send adapter
polling to the next GPU. Any other value that cannot be read makes the whole output a ParseError:
half-trusting a garbled reading is how the wrong GPU gets blamed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from ops.parse.errors import ParseError, as_text

_INT = re.compile(r"[0-9]{1,12}")
# The unit nvidia-smi appends without `nounits`; any other unit (GiB, KiB) would be misread, so refuse it.
_MIB = re.compile(r"([0-9]{1,12})[ \t]*(?:MiB|MB)", re.IGNORECASE)


class _Bad(Exception):
    """Internal: one field could not be read. Never leaves this module."""


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
