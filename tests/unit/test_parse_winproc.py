"""ops.parse.winproc: Win32_Process JSON from both PowerShell versions, and Windows argv splitting."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ops.parse import ParseError, WinProc, parse_win_processes, split_windows_cmdline
from ops.parse.winproc import MAX_CHARS, PS_PROCESS_QUERY, parse_creation_date

DATA = Path(__file__).resolve().parents[1] / "data"
PS51 = (DATA / "winproc_ps51.json").read_text(encoding="utf-8")
PS7 = (DATA / "winproc_ps7.json").read_text(encoding="utf-8")
PS51_SINGLE = (DATA / "winproc_ps51_single.json").read_text(encoding="utf-8")

BOOT = 1715668262.0  # 2024-05-14T06:31:02Z, System's CreationDate in both samples
SERVER_2031 = ('"C:\\CARLA_0.9.15\\WindowsNoEditor\\CarlaUE4\\Binaries\\Win64\\CarlaUE4-Win64-Shipping.exe" '
               "CarlaUE4 -RenderOffScreen -nosound -carla-rpc-port=2031 -graphicsadapter=0")


def procs(text: str) -> tuple[WinProc, ...]:
    result = parse_win_processes(text)
    assert isinstance(result, tuple), result
    return result


@pytest.mark.parametrize("text", [PS51, PS7], ids=["ps51", "ps7"])
def test_samples_parse(text: str) -> None:
    table = procs(text)
    assert len(table) == 13
    by_pid = {p.pid: p for p in table}
    assert by_pid[0] == WinProc(0, 0, None, None)              # System Idle: no cmdline, no date
    assert by_pid[4] == WinProc(4, 0, None, BOOT)              # System
    assert by_pid[1180].cmdline is None                        # another user's service, not elevated
    assert by_pid[7352].ppid == 7340 and by_pid[7352].cmdline == SERVER_2031
    assert by_pid[7352].create_time == pytest.approx(BOOT + 3600.187, abs=1e-6)
    assert by_pid[9244].cmdline == '"C:\\Users\\carla\\Tom\'s Tools\\a&b <x>.exe" --label "café \\"quoted\\"" C:\\dir\\\\'


def test_both_versions_describe_the_same_table() -> None:
    old, new = procs(PS51), procs(PS7)
    assert [(p.pid, p.ppid, p.cmdline) for p in old] == [(p.pid, p.ppid, p.cmdline) for p in new]
    for a, b in zip(old, new):
        if a.create_time is None:
            assert b.create_time is None
        else:
            # /Date()/ carries milliseconds; PowerShell 7 up to 100 ns (612: .4961234 s).
            assert b.create_time == pytest.approx(a.create_time, abs=1e-3)
    assert new[3].create_time == pytest.approx(BOOT + 4.4961234, abs=1e-6)


def test_single_object_not_wrapped() -> None:
    assert procs(PS51_SINGLE) == (WinProc(7352, 7340, SERVER_2031, 1715671862.187),)


def test_finding_the_server_by_exact_token() -> None:
    # Both servers have the same image name; only the whole `-carla-rpc-port=N` token tells them apart,
    # and a null cmdline is unknown (never "no marker").
    table = procs(PS7)
    hits = [p.pid for p in table if p.argv is not None and "-carla-rpc-port=2031" in p.argv]
    assert hits == [7340, 7352]
    assert not [p for p in table if p.argv is not None and "-carla-rpc-port=203" in p.argv]
    assert [p.pid for p in table if p.argv is None] == [0, 4, 132, 1180]


@pytest.mark.parametrize("date, expected", [
    ("/Date(1614185732000)/", 1614185732.0),
    ("/Date(1614185732123+0100)/", 1614185732.123),   # the suffix names the writer's zone; ms are UTC
    ("/Date(1614185732000-0500)/", 1614185732.0),
    ("2021-02-24T16:55:32Z", 1614185732.0),
    ("2021-02-24T17:55:32+01:00", 1614185732.0),
    ("2021-02-24T11:55:32-05:00", 1614185732.0),
    ("2021-02-24T17:55:32+0100", 1614185732.0),
    ("2021-02-24T17:55:32.5+01:00", 1614185732.5),
    ("2021-02-24T17:55:32.1234567+01:00", 1614185732.1234567),
    ("2021-02-24T16:55:32.1234567", 1614185732.1234567),  # no offset: read as UTC (consistent, see module)
    ("20210224175532.123456+060", 1614185732.123456),     # DMTF (Get-WmiObject)
    ({"value": "/Date(1614185732000)/", "DisplayHint": 2, "DateTime": "Wednesday, February 24, 2021 5:55:32 PM"},
     1614185732.0),
    ({"value": "2021-02-24T17:55:32+01:00", "DisplayHint": 2, "DateTime": "..."}, 1614185732.0),
    ({"value": None, "DisplayHint": 2}, None),
    (None, None),
    ("/Date(-62135596800000)/", None),   # DateTime.MinValue: a sentinel, not a start time
    ("0001-01-01T00:00:00", None),
])
def test_creation_date_forms(date: object, expected: float | None) -> None:
    row = {"ProcessId": 7352, "ParentProcessId": 7340, "CommandLine": "x", "CreationDate": date}
    table = procs(json.dumps(row))
    if expected is None:
        assert table[0].create_time is None
    else:
        assert table[0].create_time == pytest.approx(expected, abs=1e-6)


def test_parse_creation_date_alone_never_raises() -> None:
    assert parse_creation_date("/Date(1614185732000)/") == 1614185732.0
    assert parse_creation_date(None) is None
    for bad in ("yesterday", 12, {"DisplayHint": 2}, ["x"], "2021-13-01T00:00:00Z"):
        assert isinstance(parse_creation_date(bad), ParseError)


def test_escaped_slash_form_as_written_by_51() -> None:
    text = '{"ProcessId":  1, "ParentProcessId":  0, "CommandLine":  "a", "CreationDate":  "\\/Date(1614185732000)\\/"}'
    assert procs(text)[0].create_time == 1614185732.0


def test_property_names_are_case_insensitive() -> None:
    assert procs('[{"processid": 5, "PARENTPROCESSID": 1, "commandLine": "a"}]') == (WinProc(5, 1, "a", None),)


@pytest.mark.parametrize("text, why", [
    ("", "empty output"),
    ("\r\n", "empty output"),
    ("[]", "empty array"),
    ('[{"ProcessId": 4, "ParentProcessId": 0', "not valid JSON"),
    ("Get-CimInstance : Access denied\r\nAt line:1 char:1", "not valid JSON"),
    ('[{"ParentProcessId": 0, "CommandLine": null}]', "no ProcessId"),
    ('[{"ProcessId": "4"}]', "not a process id"),
    ('[{"ProcessId": -4}]', "not a process id"),
    ('[{"ProcessId": 4294967296}]', "not a process id"),
    ('[{"ProcessId": true}]', "not a process id"),
    ('[{"ProcessId": 4, "ParentProcessId": 1.5}]', "not a process id"),
    ('[{"ProcessId": 4, "CommandLine": ["a"]}]', "CommandLine"),
    ('[{"ProcessId": 4, "CreationDate": "yesterday"}]', "unknown form"),
    ('[{"ProcessId": 4, "CreationDate": 1614185732000}]', "CreationDate is int"),
    ('[{"ProcessId": 4, "CreationDate": {"DisplayHint": 2}}]', "without 'value'"),
    ('[{"ProcessId": 4, "CreationDate": {"value": {"value": "/Date(1)/"}}}]', "nested"),
    ('[{"ProcessId": 4, "CreationDate": "2021-02-30T00:00:00Z"}]', "impossible date"),
    ('[{"ProcessId": 4, "CreationDate": "2021-02-24T17:55:32+25:00"}]', "offset"),
    ('[{"ProcessId": 4, "CreationDate": NaN}]', "not acceptable JSON"),
    ('[4, 5]', "not an object"),
    ('"just a string"', "not an object"),
])
def test_refused(text: str, why: str) -> None:
    result = parse_win_processes(text)
    assert isinstance(result, ParseError), result
    assert why in result.reason and result.what == "win32_process json"


def test_allow_empty_for_filtered_queries() -> None:
    assert parse_win_processes("", allow_empty=True) == ()
    assert parse_win_processes("[]", allow_empty=True) == ()


def test_oversized_bytes_and_non_text() -> None:
    assert isinstance(parse_win_processes("[" + " " * MAX_CHARS + "]"), ParseError)
    assert procs(PS51.encode("utf-8")) == procs(PS51)
    assert procs("\ufeff" + PS7) == procs(PS7)
    assert isinstance(parse_win_processes(None), ParseError)  # type: ignore[arg-type]


def test_query_constant_wraps_the_pipeline() -> None:
    assert PS_PROCESS_QUERY.startswith("ConvertTo-Json -Compress -InputObject @(Get-CimInstance Win32_Process")
    assert "Select-Object ProcessId,ParentProcessId,CommandLine,CreationDate" in PS_PROCESS_QUERY


# ---- split_windows_cmdline ------------------------------------------------------------------------

# The table in Microsoft's "Parsing C++ command-line arguments" (argv[1..] for a program named `p`),
# plus argv[0] and edge cases of the same rules.
CMDLINES = [
    ('p "abc" d e', ["p", "abc", "d", "e"]),
    (r'p a\\b d"e f"g h', ["p", r"a\\b", "de fg", "h"]),
    (r'p a\\\"b c d', ["p", r'a\"b', "c", "d"]),
    (r'p a\\\\"b c" d e', ["p", r"a\\b c", "d", "e"]),
    ('p a"b"" c d', ["p", 'ab" c d']),
    ("", []),
    ("p", ["p"]),
    ("p   ", ["p"]),
    ("p\ta\t\tb", ["p", "a", "b"]),
    ('p ""', ["p", ""]),
    ('p "" ""', ["p", "", ""]),
    ('p "a b', ["p", "a b"]),               # an unclosed quote runs to the end
    (r"p a\b\c\\", ["p", r"a\b\c\\"]),      # backslashes not before a quote are literal
    (r'p \"', ["p", '"']),
    (r'p \\"', ["p", "\\"]),
    ('p """"', ["p", '"']),                 # open, "" -> literal, close
    # argv[0]: quotes toggle, backslashes are literal, a quote inside does not escape
    (r'"C:\Program Files\CARLA\CarlaUE4.exe" -carla-rpc-port=2031',
     [r"C:\Program Files\CARLA\CarlaUE4.exe", "-carla-rpc-port=2031"]),
    (r'C:\dir\"x y" z', [r"C:\dir\x y", "z"]),     # the backslash stays, the quote only toggles
    (r'"C:\a b\"c d', [r"C:\a b\c", "d"]),
    (" p a", ["", "p", "a"]),                # the CRT's argv[0] ends at the first blank: an empty program
    (SERVER_2031, [r"C:\CARLA_0.9.15\WindowsNoEditor\CarlaUE4\Binaries\Win64\CarlaUE4-Win64-Shipping.exe",
                   "CarlaUE4", "-RenderOffScreen", "-nosound", "-carla-rpc-port=2031", "-graphicsadapter=0"]),
    ('"C:\\Users\\carla\\Tom\'s Tools\\a&b <x>.exe" --label "café \\"quoted\\"" C:\\dir\\\\',
     ["C:\\Users\\carla\\Tom's Tools\\a&b <x>.exe", "--label", 'café "quoted"', "C:\\dir\\\\"]),
]


@pytest.mark.parametrize("cmdline, argv", CMDLINES)
def test_split_windows_cmdline(cmdline: str, argv: list[str]) -> None:
    assert split_windows_cmdline(cmdline) == argv


@pytest.mark.parametrize("args", [
    ["C:\\x\\python.exe", "a b", 'q"uote', "back\\slash\\", "tr\\\\\"icky", "", "-carla-rpc-port=2031"],
    ["p", "\\\\server\\share\\f", "ends with \\", "\t tab"],
    ["p", '"', '""', '\\"', "a\\\\\\b"],
])
def test_inverse_of_list2cmdline(args: list[str]) -> None:
    # subprocess.list2cmdline is CPython's encoder for exactly these rules (for argv[1..]).
    assert split_windows_cmdline(subprocess.list2cmdline(args)) == args
