"""ops.parse.netsh: the winNAT exclusion table, from real and localized outputs."""
from __future__ import annotations

from pathlib import Path

import pytest

from ops.parse import ExclusionRange, ExclusionTable, ParseError, parse_excluded_ranges
from ops.parse.netsh import MAX_CHARS

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE_A = (DATA / "netsh_otel_pr10839_a.txt").read_text(encoding="utf-8")
SAMPLE_B = (DATA / "netsh_otel_pr10839_b.txt").read_text(encoding="utf-8")


def R(start: int, end: int, adm: bool = False) -> ExclusionRange:
    return ExclusionRange(start, end, adm)


RANGES_A = (R(80, 80), R(5986, 5986), R(47001, 47001), R(56638, 56737), R(56738, 56837))
RANGES_B = (R(80, 80), R(5986, 5986), R(47001, 47001), R(55679, 55679, True))

# Constructed: the English sample with its words translated as Windows prints them in that language.
# The parser must not care: only the dashed line and the digits matter.
LOCALIZED = {
    "es": ("Intervalos de exclusión de puertos del protocolo tcp", "Puerto de inicio    Puerto final",
           "* - Exclusiones de puertos administradas.", "Aceptar."),
    "de": ("Portausschlussbereiche für das Protokoll tcp", "Startport    Endport",
           "* - Verwaltete Portausschlüsse.", "OK."),
    "zh": ("协议 tcp 端口排除范围", "起始端口    结束端口", "* - 管理的端口排除。", "确定。"),
    "fr": ("Plages d’exclusion de ports du protocole tcp", "Port de début    Port de fin",
           "* - Exclusions de ports administrées.", "Ok."),
    "ja": ("プロトコル tcp ポート除外範囲", "開始ポート    終了ポート", "* - 管理されているポート除外。", "OK"),
}


def localize(sample: str, lang: str) -> str:
    title, header, footer, ok = LOCALIZED[lang]
    return (sample.replace("Protocol tcp Port Exclusion Ranges", title)
            .replace("Start Port    End Port", header)
            .replace("* - Administered port exclusions.", footer)
            .replace("Ok.", ok))


@pytest.mark.parametrize("sample, ranges", [(SAMPLE_A, RANGES_A), (SAMPLE_B, RANGES_B)], ids=["a", "b"])
def test_real_samples_exact(sample: str, ranges: tuple[ExclusionRange, ...]) -> None:
    table = parse_excluded_ranges(sample)
    assert table == ExclusionTable(ranges=ranges, unparsed=(), separator_found=True)


@pytest.mark.parametrize("lang", sorted(LOCALIZED))
@pytest.mark.parametrize("sample, ranges", [(SAMPLE_A, RANGES_A), (SAMPLE_B, RANGES_B)], ids=["a", "b"])
def test_localized_headers_and_footers(lang: str, sample: str, ranges: tuple[ExclusionRange, ...]) -> None:
    text = localize(sample, lang)
    assert text != sample
    table = parse_excluded_ranges(text)
    assert isinstance(table, ExclusionTable) and table.ranges == ranges and table.unparsed == ()


@pytest.mark.parametrize("transform", [
    pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf"),
    pytest.param(lambda s: "\ufeff" + s, id="bom"),
    pytest.param(lambda s: "\n".join(line + "   \t" for line in s.split("\n")), id="trailing-blanks"),
    pytest.param(lambda s: s.replace("\n", "\n\n"), id="blank-lines"),
    pytest.param(lambda s: "\r\n\r\n" + s.replace("\n", "\r\n") + "\r\n\r\n", id="leading-trailing-crlf"),
    pytest.param(lambda s: s.replace("\n", "\r"), id="cr-only"),
    pytest.param(lambda s: s.encode("utf-8"), id="bytes"),
    pytest.param(lambda s: "\ufeff".encode("utf-8") + s.encode("utf-8"), id="bytes-bom"),
    # UTF-16LE (PowerShell's pipe encoding) read as an 8-bit code page leaves NULs between characters.
    pytest.param(lambda s: s.encode("utf-16-le").decode("latin-1"), id="utf16-read-as-latin1"),
])
def test_layout_variations(transform, ) -> None:
    table = parse_excluded_ranges(transform(SAMPLE_B))
    assert isinstance(table, ExclusionTable)
    assert table.ranges == RANGES_B and table.unparsed == ()


def test_separator_with_zero_rows_is_a_valid_empty_table() -> None:
    text = ("Protocol tcp Port Exclusion Ranges\r\n\r\nStart Port    End Port\r\n"
            "----------    --------\r\n\r\n* - Administered port exclusions.\r\n\r\n")
    assert parse_excluded_ranges(text) == ExclusionTable(ranges=(), unparsed=())


@pytest.mark.parametrize("text", [
    "",
    "\r\n\r\n",
    "The requested operation requires elevation (Run as administrator).\r\n",
    "La operación solicitada requiere elevación.\r\n",
    "The following command was not found: int ipv4 show excludedportrange protocol=tcp.\r\n",
    "Protocol tcp Port Exclusion Ranges\r\n\r\nStart Port    End Port\r\n",  # cut before the separator
    "\x00\x00\x00",
])
def test_no_separator_and_no_rows_is_a_parse_error(text: str) -> None:
    err = parse_excluded_ranges(text)
    assert isinstance(err, ParseError)
    assert err.what == "netsh excludedportrange"
    assert err.text == text  # the evidence: what netsh actually said (short texts are kept whole)


def test_rows_without_separator_are_still_read() -> None:
    table = parse_excluded_ranges("     50000       50059\n     50060       50159     *\n")
    assert isinstance(table, ExclusionTable)
    assert table.ranges == (R(50000, 50059), R(50060, 50159, True)) and not table.separator_found


@pytest.mark.parametrize("row", [
    "     56737       56638",       # start > end
    "         0          10",       # port 0
    "     65535       65536",       # beyond 65535
    "    99999999999     1",        # too many digits to be a port
    "        80          80    **",
    "        80          80    x",
    "        80 ",
    "        80   81   82",
    "    1,000       1,010",        # grouping separators are not what netsh writes
    "        ٨٠          ٨٠",       # Arabic-Indic digits: int() would read them, netsh never prints them
])
def test_impossible_or_odd_rows_go_to_unparsed(row: str) -> None:
    text = SAMPLE_B.replace("     47001       47001      \n", f"     47001       47001      \n{row}\n")
    table = parse_excluded_ranges(text)
    assert isinstance(table, ExclusionTable)
    assert table.ranges == RANGES_B
    if any(ch.isdigit() for ch in row):
        assert table.unparsed == (row.rstrip(),)


def test_concatenated_outputs_report_every_row() -> None:
    # The shared fixture holds two outputs back to back: reading more exclusions is the safe side.
    table = parse_excluded_ranges(SAMPLE_A + "\n\n" + SAMPLE_B)
    assert isinstance(table, ExclusionTable)
    assert table.ranges == RANGES_A + RANGES_B


def test_find_and_contains() -> None:
    table = parse_excluded_ranges(SAMPLE_A)
    assert isinstance(table, ExclusionTable)
    assert table.find(56700) == R(56638, 56737)
    assert table.find(56837) == R(56738, 56837)
    assert table.find(2031) is None
    assert 80 in R(80, 80) and 81 not in R(80, 80) and "80" not in R(80, 80)


def test_oversized_input_is_refused_quickly() -> None:
    huge = SAMPLE_A + "x" * MAX_CHARS
    err = parse_excluded_ranges(huge)
    assert isinstance(err, ParseError) and "too large" in err.reason
    assert len(err.text) <= 300


@pytest.mark.parametrize("value", [None, 42, ["80 80"], object()])
def test_non_text_is_a_parse_error(value: object) -> None:
    assert isinstance(parse_excluded_ranges(value), ParseError)  # type: ignore[arg-type]
