"""Property tests of every ops.parse parser: whatever comes in, a typed value or a ParseError comes out.

Inputs: random text and bytes, mutated real samples (cut, spliced, duplicated, truncated), localized
netsh headers, wrong-typed checkpoint fields, hostile XML, oversized inputs, and generated valid
documents that must read back exactly. Every input tried is counted; when CARLA_FAULTS_COUNT_FILE is
set, the total is appended to it as `parsers <N>` for the fault-suite report.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ops.parse import (
    Checkpoint,
    ExclusionRange,
    ExclusionTable,
    ParseError,
    RoutesFile,
    SmiLog,
    WinProc,
    completed_records,
    driving_score,
    last_status,
    parse_checkpoint,
    parse_excluded_ranges,
    parse_query_xml,
    parse_routes,
    parse_win_processes,
    record_penalty,
    resume_index,
    split_windows_cmdline,
    success_rate,
    wall_game_ratio,
)
from ops.parse import checkpoint as checkpoint_mod
from ops.parse import netsh as netsh_mod
from ops.parse import nvsmi as nvsmi_mod
from ops.parse import routes as routes_mod
from ops.parse import winproc as winproc_mod
from tests.support import nvsmi_csv
from tests.support.nvsmi_csv import AppReading, GpuReading, parse_compute_apps, parse_query_gpu

DATA = Path(__file__).resolve().parent.parent / "data"
NETSH = [(DATA / f"netsh_otel_pr10839_{x}.txt").read_text(encoding="utf-8") for x in "ab"]
NVSMI = (DATA / "nvidia_smi_sample_h200.txt").read_text(encoding="utf-8")
NVSMI_XML = [(DATA / "nvsmi_vulkan" / f"{x}.q_x.xml").read_text(encoding="utf-8")
             for x in ("h200_vulkan_cg_gl_g", "h200_gl_g_cuda_c", "h200_idle")]
CHECKPOINT = (DATA / "b2d_checkpoint_tfpp_0.json").read_text(encoding="utf-8")
CHECKPOINT_DATA = json.loads(CHECKPOINT)
ROUTES10 = (DATA / "drivetransformer_bench2drive_dev10.xml").read_text(encoding="utf-8")
WINPROC = [(DATA / f).read_text(encoding="utf-8") for f in ("winproc_ps51.json", "winproc_ps7.json",
                                                             "winproc_ps51_single.json")]

COUNT = {"inputs": 0}
FAST = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(FAST, max_examples=60)  # examples that re-serialise the 88 KB checkpoint


@pytest.fixture(scope="module", autouse=True)
def _report_count():
    yield
    path = os.environ.get("CARLA_FAULTS_COUNT_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"parsers {COUNT['inputs']}\n")


def _ok_tuple(kind: type) -> Callable[[object], bool]:
    return lambda v: isinstance(v, tuple) and all(isinstance(x, kind) for x in v)


PARSERS: dict[str, tuple[Callable[[object], object], Callable[[object], bool]]] = {
    "netsh": (parse_excluded_ranges, lambda v: isinstance(v, ExclusionTable)),
    "gpu": (parse_query_gpu, _ok_tuple(GpuReading)),
    "apps": (parse_compute_apps, _ok_tuple(AppReading)),
    "xml": (parse_query_xml, lambda v: isinstance(v, SmiLog)),
    "checkpoint": (parse_checkpoint, lambda v: isinstance(v, Checkpoint)),
    "routes": (parse_routes, lambda v: isinstance(v, RoutesFile)),
    "winproc": (parse_win_processes, _ok_tuple(WinProc)),
}


def check(name: str, data: object) -> object:
    """Run one parser on one input: it must return its value type or a ParseError, never raise."""
    COUNT["inputs"] += 1
    parser, is_value = PARSERS[name]
    result = parser(data)
    assert isinstance(result, ParseError) or is_value(result), (name, type(result))
    if isinstance(result, ParseError):
        assert isinstance(result.reason, str) and result.reason
        assert isinstance(result.text, str) and len(result.text) <= 300
    else:
        _check_invariants(name, result)
    return result


def _check_invariants(name: str, value: object) -> None:
    if name == "netsh":
        assert isinstance(value, ExclusionTable)
        assert all(1 <= r.start <= r.end <= 65535 for r in value.ranges)
    elif name == "checkpoint":
        assert isinstance(value, Checkpoint)
        # A value that parsed must survive every helper too: they are what the console calls next.
        if value.progress is not None:
            done, total = value.progress
            assert 0 <= done <= total
        completed_records(value), driving_score(value), success_rate(value), last_status(value)
        wall_game_ratio(value), resume_index(value), [record_penalty(r) for r in value.records]
    elif name == "gpu":
        assert all(g.used_mb is None or g.used_mb >= 0 for g in value)  # type: ignore[attr-defined]
    elif name == "xml":
        assert isinstance(value, SmiLog) and value.gpus
        assert all(p.pid >= 0 and (p.used_mb is None or p.used_mb >= 0)
                   for g in value.gpus for p in g.processes or ())


# ---- strategies -----------------------------------------------------------------------------------

LINE_TEXT = st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters="\x85")


@st.composite
def mutated(draw: st.DrawFn, samples: list[str]) -> str:
    """A real sample with 1-4 random edits: cut, insert, delete, duplicate, replace, swap lines."""
    text = draw(st.sampled_from(samples))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "insert", "delete", "dup", "replace", "swap", "crlf"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 200)))
        if op == "truncate":
            text = text[:i]
        elif op == "insert":
            text = text[:i] + draw(st.text(max_size=30)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "dup":
            text = text[:j] + text[i:j] + text[j:]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(["\x00", "*", "-", ",", "[N/A]", "\ufeff", "9" * 12, "\"",
                                                    "{", "]", "<", "&", "\\"])) + text[j:]
        elif op == "swap":
            lines = text.split("\n")
            if len(lines) > 1:
                a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        else:
            text = text.replace("\n", "\r\n")
    return text


def decoded_bytes() -> st.SearchStrategy[str | bytes]:
    """Random bytes, raw or decoded the ways a tool's output gets decoded in the wild."""
    return st.binary(max_size=400).flatmap(lambda b: st.sampled_from([
        b, b.decode("utf-8", "replace"), b.decode("latin-1"), b.decode("utf-16-le", "replace"),
        b.decode("cp437"), b.decode("utf-8", "surrogateescape")]))


ANY_INPUT = st.one_of(st.text(max_size=400), decoded_bytes())


# ---- every parser: random and mutated input ------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PARSERS))
@FAST
@given(data=ANY_INPUT)
def test_random_input_never_raises(name: str, data: str | bytes) -> None:
    check(name, data)


SAMPLES = {"netsh": NETSH, "gpu": [NVSMI], "apps": [NVSMI], "xml": NVSMI_XML, "checkpoint": [CHECKPOINT],
           "routes": [ROUTES10], "winproc": WINPROC}


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(FAST, max_examples=80)
@given(data=st.data())
def test_mutated_real_samples_never_raise(name: str, data: st.DataObject) -> None:
    text = data.draw(mutated(SAMPLES[name]))
    check(name, text)
    check(name, text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(FAST, max_examples=40)
@given(data=st.data())
def test_any_sample_fed_to_any_parser(name: str, data: st.DataObject) -> None:
    # The wrong tool's output (a checkpoint given to the netsh parser...) must be refused, not crash.
    other = data.draw(st.sampled_from(sorted(SAMPLES)))
    check(name, data.draw(mutated(SAMPLES[other])))


@pytest.mark.parametrize("name, limit", [("netsh", netsh_mod.MAX_CHARS), ("gpu", nvsmi_csv.MAX_CHARS),
                                         ("apps", nvsmi_csv.MAX_CHARS), ("xml", nvsmi_mod.MAX_XML_CHARS),
                                         ("checkpoint", checkpoint_mod.MAX_CHARS),
                                         ("routes", routes_mod.MAX_CHARS), ("winproc", winproc_mod.MAX_CHARS)])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_oversized_is_refused_fast(name: str, limit: int, as_bytes: bool) -> None:
    chunk = SAMPLES[name][0]
    text = chunk * (limit // len(chunk) + 1)
    started = time.perf_counter()
    result = check(name, text.encode("utf-8") if as_bytes else text)
    assert isinstance(result, ParseError) and "too large" in result.reason
    assert time.perf_counter() - started < 1.0


# ---- netsh: localized and generated tables read back exactly --------------------------------------

WORDS = st.text(alphabet=st.characters(categories=("L", "Zs", "Po", "Mn"), exclude_characters="*-\x85"),
                max_size=40)
RANGE = st.tuples(st.integers(1, 65535), st.integers(0, 65534), st.booleans()).map(
    lambda t: ExclusionRange(t[0], min(65535, t[0] + t[1] % 200), t[2]))


def render_netsh(ranges: list[ExclusionRange], title: str, header: str, footer: str, ok: str,
                 newline: str, pad: int) -> str:
    lines = [title, "", header, "----------    --------" + " " * pad]
    lines += [f"{r.start:>10}  {r.end:>10}" + ("     *" if r.administered else " " * pad) for r in ranges]
    lines += ["", "* - " + footer, "", ok]
    return newline.join(lines) + newline


@FAST
@given(ranges=st.lists(RANGE, max_size=12), title=WORDS, header=WORDS, footer=WORDS, ok=WORDS,
       newline=st.sampled_from(["\n", "\r\n"]), pad=st.integers(0, 6), bom=st.booleans())
def test_netsh_generated_tables_read_back(ranges: list[ExclusionRange], title: str, header: str, footer: str,
                                          ok: str, newline: str, pad: int, bom: bool) -> None:
    assume(not ok.lstrip().startswith("*"))
    text = ("\ufeff" if bom else "") + render_netsh(ranges, title, header, footer, ok, newline, pad)
    table = check("netsh", text)
    assert table == ExclusionTable(ranges=tuple(ranges), unparsed=())


@FAST
@given(sample=st.sampled_from([0, 1]), title=WORDS, header=WORDS, footer=WORDS, ok=WORDS)
def test_netsh_localized_real_samples(sample: int, title: str, header: str, footer: str, ok: str) -> None:
    assume(not ok.lstrip().startswith("*"))
    text = (NETSH[sample].replace("Protocol tcp Port Exclusion Ranges", title)
            .replace("Start Port    End Port", header).replace("Administered port exclusions.", footer)
            .replace("Ok.", ok))
    expected = parse_excluded_ranges(NETSH[sample])
    assert check("netsh", text) == expected


@FAST
@given(start=st.integers(-10, 70000), end=st.integers(-10, 70000))
def test_netsh_impossible_ranges_go_to_unparsed(start: int, end: int) -> None:
    assume(not (1 <= start <= end <= 65535))
    row = f"{start:>10}  {end:>10}"
    text = NETSH[1].replace("     47001       47001      \n", f"     47001       47001      \n{row}\n")
    table = check("netsh", text)
    assert isinstance(table, ExclusionTable)
    assert table.ranges == parse_excluded_ranges(NETSH[1]).ranges  # type: ignore[union-attr]
    assert table.unparsed == (row,)


# ---- nvidia-smi: generated CSV reads back; placeholders are None ---------------------------------

PLACEHOLDER = st.one_of(st.sampled_from(["[N/A]", "[Not Supported]", "N/A", "[Unknown Error]"]),
                        st.text(alphabet=st.characters(categories=("L", "Zs")), max_size=20).map(lambda s: f"[{s}]"))
MIB = st.one_of(st.integers(0, 10**9), PLACEHOLDER)
GPU_NAME = st.text(alphabet=st.characters(categories=("L", "N", "Zs", "Pd", "Po")), min_size=1, max_size=30).map(
    str.strip).filter(bool)


def _mib_field(v: int | str, units: bool) -> str:
    return f"{v} MiB" if units and isinstance(v, int) else str(v)


@FAST
@given(gpus=st.lists(st.tuples(GPU_NAME, MIB, MIB), min_size=1, max_size=8), header=st.booleans(),
       units=st.booleans(), newline=st.sampled_from(["\n", "\r\n"]))
def test_nvsmi_generated_gpu_csv_reads_back(gpus: list[tuple[str, int | str, int | str]], header: bool,
                                            units: bool, newline: str) -> None:
    lines = ["index, name, memory.used [MiB], memory.total [MiB]"] if header else []
    lines += [f"{i}, {name}, {_mib_field(u, units)}, {_mib_field(t, units)}" for i, (name, u, t) in enumerate(gpus)]
    result = check("gpu", newline.join(lines) + newline)
    assert result == tuple(GpuReading(i, name, u if isinstance(u, int) else None, t if isinstance(t, int) else None)
                           for i, (name, u, t) in enumerate(gpus))


@FAST
@given(apps=st.lists(st.tuples(st.integers(0, 2**32), MIB), max_size=8), header=st.booleans(), units=st.booleans())
def test_nvsmi_generated_apps_csv_reads_back(apps: list[tuple[int, int | str]], header: bool, units: bool) -> None:
    lines = ["pid, used_gpu_memory [MiB]"] if header else []
    lines += [f"{pid}, {_mib_field(m, units)}" for pid, m in apps]
    result = check("apps", "\n".join(lines) + ("\n" if lines else ""))
    assert result == tuple(AppReading(pid, m if isinstance(m, int) else None) for pid, m in apps)


# ---- checkpoint: wrong types anywhere, truncation anywhere ----------------------------------------

JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


def _small_checkpoint() -> dict:
    """The real sample cut to its first four records (one with outside lanes): fast to re-serialise."""
    data = copy.deepcopy(CHECKPOINT_DATA)
    data["_checkpoint"]["records"] = data["_checkpoint"]["records"][:5]
    data["_checkpoint"]["progress"] = [5, 28]
    return data


SMALL = _small_checkpoint()


@st.composite
def replaced_somewhere(draw: st.DrawFn, doc: dict) -> dict:
    """`doc` with the value at a random path (root to leaf) replaced by random JSON."""
    doc = copy.deepcopy(doc)
    node: object = doc
    parent, key = None, None
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 4)) > 0:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]  # type: ignore[index]
    value = draw(JSON_VALUE)
    if parent is None:
        return {"_root": value} if draw(st.booleans()) else value  # type: ignore[return-value]
    parent[key] = value  # type: ignore[index]
    return doc


@SLOW
@given(data=st.data())
def test_checkpoint_wrong_types_anywhere(data: st.DataObject) -> None:
    doc = data.draw(replaced_somewhere(SMALL))
    check("checkpoint", json.dumps(doc))


@SLOW
@given(cut=st.integers(0, len(CHECKPOINT) - 1))
def test_checkpoint_any_truncation_is_a_parse_error(cut: int) -> None:
    # The real file ends with its closing brace: every strict prefix is a half-written file.
    result = check("checkpoint", CHECKPOINT[:cut])
    assert isinstance(result, ParseError)


@FAST
@given(progress=JSON_VALUE)
def test_checkpoint_progress_is_valid_or_refused(progress: object) -> None:
    doc = {"_checkpoint": {"progress": progress, "records": []}, "entry_status": "Started"}
    result = check("checkpoint", json.dumps(doc))
    valid = (isinstance(progress, list) and len(progress) == 2
             and all(isinstance(v, int) and not isinstance(v, bool) for v in progress)
             and 0 <= progress[0] <= progress[1])
    if valid:
        assert isinstance(result, Checkpoint) and result.progress == tuple(progress)  # type: ignore[arg-type]
    elif progress is None or progress == []:
        assert isinstance(result, Checkpoint) and result.progress is None
    else:
        assert isinstance(result, ParseError)


# ---- routes: generated files read back; any DOCTYPE refused ---------------------------------------

ROUTE_ID = st.text(alphabet="0123456789abcXYZ_", min_size=1, max_size=8)
TOWN = st.sampled_from(["Town01", "Town12", "Town13", "Town10HD"])


@FAST
@given(routes=st.lists(st.tuples(ROUTE_ID, TOWN), min_size=1, max_size=15), decl=st.booleans())
def test_routes_generated_read_back(routes: list[tuple[str, str]], decl: bool) -> None:
    body = "".join(f'<route id="{rid}" town="{town}"><waypoints><position x="1" y="2" z="3"/></waypoints></route>'
                   for rid, town in routes)
    text = ('<?xml version="1.0" encoding="UTF-8"?>' if decl else "") + f"<routes>{body}</routes>"
    result = check("routes", text)
    assert isinstance(result, RoutesFile)
    assert result.route_ids == tuple(r for r, _ in routes) and result.towns == tuple(t for _, t in routes)


@FAST
@given(subset=st.text(max_size=60), name=st.text(alphabet="abcxyz", min_size=1, max_size=6))
def test_routes_any_doctype_is_refused(subset: str, name: str) -> None:
    text = f'<?xml version="1.0"?><!DOCTYPE {name} [<!ENTITY e "{subset}">]><routes><route id="1" town="T"/></routes>'
    result = check("routes", text)
    assert isinstance(result, ParseError)


@FAST
@given(cut=st.integers(0, ROUTES10.rindex("</routes>")))
def test_routes_truncated_real_file_is_refused(cut: int) -> None:
    assert isinstance(check("routes", ROUTES10[:cut]), ParseError)


# ---- win32_process: generated tables read back; argv splitting inverts list2cmdline --------------

MS = st.integers(1, 4102444800000)  # 1970 .. 2100


def _date_forms(ms: int) -> st.SearchStrategy[object]:
    from datetime import datetime, timedelta, timezone
    offset = timedelta(minutes=60)
    local = datetime.fromtimestamp(ms / 1000, timezone(offset))
    iso = local.isoformat(timespec="milliseconds")
    return st.sampled_from([f"/Date({ms})/", f"/Date({ms}+0100)/", iso,
                            {"value": f"/Date({ms})/", "DisplayHint": 2, "DateTime": "Thursday"}])


PROC = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.one_of(st.none(), st.text(max_size=40)),
                 MS.flatmap(lambda ms: st.tuples(st.just(ms), _date_forms(ms))))


@FAST
@given(rows=st.lists(PROC, min_size=1, max_size=6), single=st.booleans(), indent=st.sampled_from([None, 2, 4]))
def test_winproc_generated_tables_read_back(rows: list, single: bool, indent: int | None) -> None:
    objs = [{"ProcessId": pid, "ParentProcessId": ppid, "CommandLine": cl, "CreationDate": date}
            for pid, ppid, cl, (_, date) in rows]
    payload: object = objs[0] if single and len(objs) == 1 else objs
    result = check("winproc", json.dumps(payload, indent=indent).replace("/", "\\/"))
    assert isinstance(result, tuple)
    assert [(p.pid, p.ppid, p.cmdline) for p in result] == [(pid, ppid, cl) for pid, ppid, cl, _ in rows]
    for proc, (*_, (ms, _)) in zip(result, rows):
        assert proc.create_time is not None and abs(proc.create_time - ms / 1000) < 1e-3


@FAST
@given(doc=JSON_VALUE)
def test_winproc_random_json_never_raises(doc: object) -> None:
    check("winproc", json.dumps(doc))
    check("winproc", json.dumps([{"ProcessId": 1, "CreationDate": doc, "CommandLine": doc}]))


ARG = st.text(alphabet='ab \t"\\\'&é', max_size=12)


@FAST
@given(args=st.lists(ARG, min_size=1, max_size=6))
def test_split_windows_cmdline_inverts_list2cmdline(args: list[str]) -> None:
    COUNT["inputs"] += 1
    argv = ["C:\\x\\p.exe"] + args
    assert split_windows_cmdline(subprocess.list2cmdline(argv)) == argv


@FAST
@given(cmdline=st.text(max_size=200))
def test_split_windows_cmdline_never_raises(cmdline: str) -> None:
    COUNT["inputs"] += 1
    argv = split_windows_cmdline(cmdline)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert (argv == []) == (cmdline == "")
