"""The fake `nvidia-smi`: the --query-* CSV and the `-q -x` XML of the real one (driver 580.159.04 on an
H200, recorded in tests/data), fed by the VRAM ledger (ledger.py).

    nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=pid[,process_name],used_memory --format=...
    nvidia-smi -q -x          (also --query --xml-format; `-d` with `-x` is refused, as driver 580 does)
    nvidia-smi -L

memory.used = the GPU's base_used_mb + the live ledger entries on it. Each entry has the process type the
real tool shows (C, G, C+G; a rendering server is C+G, as a Vulkan process is): --query-compute-apps lists
C and C+G only, `-q -x` every process with its type. No compute process: the compute-apps query prints
nothing at all (rc 0) without a header, only the header with one. The text form of `-q` is not simulated.
D/sim/nvidia-smi.mode: ok | na (memory fields `[N/A]`, as on WDDM) | fail (rc 9, the NVML driver
message) | hang (never returns: a probe must time out and say UNKNOWN).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sim.layout import SimLayout, read_mode
from sim.ledger import GpuSpec, LedgerEntry, live_entries, load_model

MODES = ("ok", "na", "fail", "hang")
NA = "[N/A]"
DRIVER_FAIL = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
RC_DRIVER_FAIL = 9
RC_BAD_ARGS = 2
# The real tool's words and exit status for `-q -x -d ...` (captured on driver 580.159.04), on stdout.
XML_DISPLAY_REFUSED = ("Invalid combination of input arguments: --display/-d flags can not be combined with "
                       "-x/--xml-format flags.")
DRIVER_VERSION = "580.159.04"
CUDA_VERSION = "13.0"


@dataclass(frozen=True)
class Field:
    header: str                       # as the real tool prints it in the header row
    unit: str | None                  # "MiB", "%" or None
    memory: bool = False              # becomes [N/A] in na mode


GPU_FIELDS: dict[str, Field] = {
    "index": Field("index", None),
    "name": Field("name", None),
    "gpu_name": Field("name", None),
    "uuid": Field("uuid", None),
    "gpu_uuid": Field("uuid", None),
    "memory.used": Field("memory.used [MiB]", "MiB", memory=True),
    "memory.total": Field("memory.total [MiB]", "MiB", memory=True),
    "memory.free": Field("memory.free [MiB]", "MiB", memory=True),
    "utilization.gpu": Field("utilization.gpu [%]", "%"),
}
APP_FIELDS: dict[str, Field] = {
    "pid": Field("pid", None),
    "process_name": Field("process_name", None),
    "name": Field("process_name", None),
    "used_memory": Field("used_gpu_memory [MiB]", "MiB", memory=True),
    "used_gpu_memory": Field("used_gpu_memory [MiB]", "MiB", memory=True),
    "gpu_uuid": Field("gpu_uuid", None),
    "gpu_name": Field("gpu_name", None),
}


@dataclass(frozen=True)
class Query:
    kind: str                         # "gpu" | "apps" | "list" | "xml"
    fields: tuple[str, ...] = ()
    header: bool = True
    units: bool = True
    ids: tuple[int, ...] | None = None


class UsageError(Exception):
    pass


class DisplayWithXml(UsageError):
    """`-d` together with `-x`: the real tool refuses the combination with its own message."""


def parse_args(argv: list[str]) -> Query:
    fields: tuple[str, ...] = ()
    kind, fmt, ids = None, None, None
    query = xml = display = False
    it = iter(argv)
    for tok in it:
        key, eq, value = tok.partition("=")
        if key in ("--query-gpu", "--query-compute-apps") and eq:
            kind = "gpu" if key == "--query-gpu" else "apps"
            fields = tuple(f.strip() for f in value.split(",") if f.strip())
        elif key == "--format" and eq:
            fmt = value
        elif key in ("-i", "--id"):
            value = value if eq else next(it, "")
            ids = tuple(int(x) for x in value.split(",") if x.strip().isdigit())
        elif tok in ("-L", "--list-gpus"):
            kind = "list"
        elif tok in ("-q", "--query"):
            query = True
        elif tok in ("-x", "--xml-format"):
            xml = True
        elif key in ("-d", "--display"):
            display = True
            if not eq:
                next(it, "")
        else:
            raise UsageError(tok)
    if xml and display:
        raise DisplayWithXml(XML_DISPLAY_REFUSED)
    if query or xml or display:
        if kind is not None or not (query and xml) or display:
            raise UsageError("only `-q -x` of the -q forms is simulated")
        return Query("xml", ids=ids)
    if kind is None:
        raise UsageError("no query")
    if kind == "list":
        return Query("list", ids=ids)
    if fmt is None:
        # The real tool insists on --format with --query-*.
        raise UsageError("--format")
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts or not opts <= {"csv", "noheader", "nounits"}:
        raise UsageError(f"--format={fmt}")
    table = GPU_FIELDS if kind == "gpu" else APP_FIELDS
    for f in fields:
        if f not in table:
            raise UsageError(f'Field "{f}" is not a valid field to query.')
    return Query(kind, fields, header="noheader" not in opts, units="nounits" not in opts, ids=ids)


def _fmt(value: object, field: Field, q: Query, na: bool) -> str:
    if na and field.memory:
        return NA
    if field.unit and q.units:
        return f"{value} {field.unit}"
    return str(value)


def _process_name(pid: int) -> str:
    # The real tool shows the process's argv[0] (e.g. `python3`, or the full path it was started by).
    from ops.platform.procs import read_proc  # /proc, not psutil: the fake starts without site-packages
    p = read_proc(pid)
    if p is None:   # gone between the ledger's read and here
        return NA
    return p.cmdline[0] if p.cmdline else p.name


def render(q: Query, gpus: tuple[GpuSpec, ...], entries: list[LedgerEntry], na: bool,
           name_of: Callable[[int], str] = _process_name) -> str:
    gpus = tuple(g for g in gpus if q.ids is None or g.index in q.ids)
    if q.kind == "list":
        return "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in gpus)
    wanted = {g.index for g in gpus}
    entries = [e for e in entries if e.gpu in wanted]
    if q.kind == "xml":
        return render_xml(gpus, [XmlProc(e.gpu, e.pid, e.type, e.mb, name_of(e.pid)) for e in entries], na)
    if q.kind == "apps":
        # Graphics-only processes have no compute context: the real query leaves them out.
        entries = [e for e in entries if "C" in e.type.split("+")]
    table = GPU_FIELDS if q.kind == "gpu" else APP_FIELDS
    lines: list[str] = []
    if q.header:
        lines.append(", ".join(table[f].header for f in q.fields))
    if q.kind == "gpu":
        for g in gpus:
            used = g.base_used_mb + sum(e.mb for e in entries if e.gpu == g.index)
            busy = any(e.gpu == g.index for e in entries)
            values = {"index": g.index, "name": g.name, "gpu_name": g.name, "uuid": g.uuid, "gpu_uuid": g.uuid,
                      "memory.used": used, "memory.total": g.total_mb,
                      "memory.free": max(g.total_mb - used, 0),
                      # A rendering UE4 server keeps its GPU busy even with no client (the IDLE incident).
                      "utilization.gpu": 98 if busy else 0}
            lines.append(", ".join(_fmt(values[f], table[f], q, na) for f in q.fields))
    else:
        by_index = {g.index: g for g in gpus}
        for e in entries:
            g = by_index[e.gpu]
            values = {"pid": e.pid, "process_name": name_of(e.pid), "name": name_of(e.pid),
                      "used_memory": e.mb, "used_gpu_memory": e.mb, "gpu_uuid": g.uuid, "gpu_name": g.name}
            lines.append(", ".join(_fmt(values[f], table[f], q, na) for f in q.fields))
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class XmlProc:
    gpu: int
    pid: int
    type: str                 # C, G, C+G
    mb: int | None            # None: N/A (as under WDDM)
    name: str


def render_xml(gpus: tuple[GpuSpec, ...], procs: list[XmlProc], na: bool, now: float | None = None) -> str:
    """`nvidia-smi -q -x` as driver 580 writes it (tests/data/nvsmi_*.xml), cut down to the header and,
    per GPU, what the console reads: product name, uuid, minor number, framebuffer memory, processes. The
    real log has some hundred more elements per GPU; the element names, order, tabs and units are its own."""
    from html import escape as _escape  # xml.sax.saxutils pulls in urllib and http.client: 40 ms a call

    def escape(text: str) -> str:
        return _escape(text, quote=False)
    stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(now))
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>",
           f"\t<timestamp>{stamp}</timestamp>", f"\t<driver_version>{DRIVER_VERSION}</driver_version>",
           f"\t<cuda_version>{CUDA_VERSION}</cuda_version>", f"\t<attached_gpus>{len(gpus)}</attached_gpus>"]

    def mib(v: int | None) -> str:
        return "N/A" if na or v is None else f"{v} MiB"
    for g in gpus:
        used = g.base_used_mb + sum(p.mb or 0 for p in procs if p.gpu == g.index)
        out += [f'\t<gpu id="00000000:{g.index * 16 + 6:02X}:00.0">',
                f"\t\t<product_name>{escape(g.name)}</product_name>", "\t\t<product_brand>NVIDIA</product_brand>",
                f"\t\t<uuid>{escape(g.uuid)}</uuid>", f"\t\t<minor_number>{g.index}</minor_number>",
                "\t\t<fb_memory_usage>", f"\t\t\t<total>{mib(g.total_mb)}</total>",
                f"\t\t\t<reserved>{mib(0)}</reserved>", f"\t\t\t<used>{mib(used)}</used>",
                f"\t\t\t<free>{mib(max(g.total_mb - used, 0))}</free>", "\t\t</fb_memory_usage>",
                "\t\t<processes>"]
        for p in (p for p in procs if p.gpu == g.index):
            out += ["\t\t\t<process_info>", "\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>",
                    "\t\t\t\t<compute_instance_id>N/A</compute_instance_id>", f"\t\t\t\t<pid>{p.pid}</pid>",
                    f"\t\t\t\t<type>{p.type}</type>", f"\t\t\t\t<process_name>{escape(p.name)}</process_name>",
                    f"\t\t\t\t<used_memory>{mib(p.mb)}</used_memory>", "\t\t\t</process_info>"]
        out += ["\t\t</processes>", "\t\t<accounted_processes>", "\t\t</accounted_processes>", "\t</gpu>"]
    out += ["", "</nvidia_smi_log>"]
    return "\n".join(out) + "\n"


def main(argv: list[str], sim_dir: str | os.PathLike[str]) -> int:
    layout = SimLayout.of(sim_dir)
    try:
        mode = read_mode(layout.nvsmi_mode, MODES)
    except ValueError as exc:
        print(f"[sim] {exc}", file=sys.stderr)
        return RC_BAD_ARGS
    if mode == "hang":
        from sim.procs import register_self
        register_self(layout, "nvidia-smi")   # so `sim down` reaps it if the caller forgot to
        threading.Event().wait()
    if mode == "fail":
        print(DRIVER_FAIL)
        return RC_DRIVER_FAIL
    try:
        q = parse_args(argv)
    except UsageError as exc:
        msg = str(exc)
        if isinstance(exc, DisplayWithXml) or msg.startswith("Field "):
            print(msg)
        else:
            print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
        return RC_BAD_ARGS
    model = load_model(layout)
    sys.stdout.write(render(q, model.gpus, this_host(live_entries(layout)), na=(mode == "na")))
    return 0


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def this_host(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """Each sim host has GPUs of its own: the `sim up --remote` hosts are network namespaces of one machine,
    so only the ledger entries of processes in this one's namespace are on its GPUs (on a local rig, all)."""
    mine = _netns("self")
    return [e for e in entries if mine is None or _netns(e.pid) in (mine, None)]


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--sim-dir":
        sys.exit(main(sys.argv[3:], sys.argv[2]))
    sys.exit("usage: fake_nvsmi.py --sim-dir D nvidia-smi-args...")
