"""PowerShell quoting and -EncodedCommand building (pure; no PowerShell needed)."""
from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops.platform import powershell as ps
from ops.platform.base import Result

QUOTES = "'\u2018\u2019\u201a\u201b"


def ps_unquote(lit: str) -> str:
    """PowerShell's own reading of a single-quoted literal: a doubled quote char is one of them."""
    assert lit[0] in QUOTES and lit[-1] in QUOTES
    body, out, i = lit[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c in QUOTES:
            assert i + 1 < len(body) and body[i + 1] in QUOTES, f"lone quote in {lit!r}"
            out.append(body[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def msvcrt_split(cmdline: str) -> list[str]:
    """How an MSVC program (CommandLineToArgvW rules) splits its command line into argv[1:]."""
    args, cur, inq, have, i = [], [], False, False, 0
    while i < len(cmdline):
        c = cmdline[i]
        if c == "\\":
            n = 0
            while i < len(cmdline) and cmdline[i] == "\\":
                n += 1
                i += 1
            if i < len(cmdline) and cmdline[i] == '"':
                cur.append("\\" * (n // 2))
                if n % 2:
                    cur.append('"')
                    i += 1
                have = True
            else:
                cur.append("\\" * n)
                have = True
            continue
        if c == '"':
            inq = not inq
            have = True
        elif c in " \t" and not inq:
            if have:
                args.append("".join(cur))
                cur, have = [], False
        else:
            cur.append(c)
            have = True
        i += 1
    if have:
        args.append("".join(cur))
    return args


@pytest.mark.parametrize("s", ["plain", "it's", "''", 'say "hi"', "$env:PATH", "`n`t", "a b  c", "ünïcødé 中文",
                               "‘typo’", "semi;colon|pipe&amp", "", "C:\\Program Files\\x\\"])
def test_ps_quote_round_trip(s):
    q = ps.ps_quote(s)
    assert q.startswith("'") and q.endswith("'")
    assert ps_unquote(q) == s
    # Nothing inside can end the literal early: every quote char inside comes in pairs.
    assert all(len(m) % 2 == 0 for m in re.findall(f"[{QUOTES}]+", q[1:-1]))


def test_ps_quote_examples():
    assert ps.ps_quote("it's") == "'it''s'"
    assert ps.ps_quote('$a "b" `c`') == "'$a \"b\" `c`'"  # no escaping needed: nothing is special
    assert ps.ps_quote("x\u2019y") == "'x\u2019\u2019y'"
    with pytest.raises(ValueError):
        ps.ps_quote("nul\x00")


@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))))
def test_ps_quote_property(s):
    assert ps_unquote(ps.ps_quote(s)) == s


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))))
def test_windows_cmdline_round_trip(args):
    assert msvcrt_split(ps.windows_cmdline(args)) == args


def test_encode_command_round_trip():
    script = "Write-Output 'ünï ''q'' \"d\" $x `b'"
    b64 = ps.encode_command(script)
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", b64), "must survive cmd.exe and PowerShell untouched"
    assert base64.b64decode(b64).decode("utf-16-le") == script
    assert ps.decode_command(b64) == script


def _literal(script: str, lhs: str) -> str:
    m = re.search(re.escape(lhs) + r" = ('(?:[^']|'')*')$", script, re.M)
    assert m, f"{lhs} not in script"
    return ps_unquote(m.group(1))


def test_ps_invoke_argv_carries_argv_exactly():
    argv = ["C:\\CARLA 0.9.15\\CarlaUE4.exe", "-carla-rpc-port=2031", "it's", 'a "q"', "$x", "`b", "", "中文 x",
            "trail\\"]
    script = ps.ps_invoke_argv(argv, env={"B2D": "1", "P": "a'b"}, cwd="C:\\run dir", timeout_s=6.0)
    assert _literal(script, "$psi.FileName") == argv[0]
    assert msvcrt_split(_literal(script, "$psi.Arguments")) == argv[1:]
    assert _literal(script, "$psi.WorkingDirectory") == "C:\\run dir"
    assert "$psi.EnvironmentVariables['B2D'] = '1'" in script
    assert "$psi.EnvironmentVariables['P'] = 'a''b'" in script
    assert "WaitForExit(6000)" in script and "taskkill.exe /T /F /PID" in script
    assert "$psi.UseShellExecute = $false" in script
    # Round-trip through the encoding the hosts send.
    full = ps.powershell_argv(script)
    assert full[:4] == ["powershell.exe", "-NoProfile", "-NonInteractive", "-EncodedCommand"]
    assert ps.decode_command(full[4]) == script


def test_ps_invoke_argv_refuses_batch_files_and_bad_env():
    for exe in ("run.bat", "C:\\x\\RUN.CMD", "x.cmd "):
        with pytest.raises(ValueError, match="batch"):
            ps.ps_invoke_argv([exe])
    with pytest.raises(ValueError):
        ps.ps_invoke_argv(["x.exe"], env={"A=B": "1"})
    with pytest.raises(ValueError):
        ps.ps_invoke_argv([])


def test_ps_run_script_and_spawn():
    inner = "Get-CimInstance Win32_Process | Select-Object ProcessId | ConvertTo-Json"
    script = ps.ps_run_script(inner, timeout_s=3)
    m = re.search(r"AddScript\(('(?:[^']|'')*')\)", script)
    assert m and ps_unquote(m.group(1)) == inner and "WaitOne(3000)" in script
    sp = ps.ps_spawn_detached(["C:\\a b\\CarlaUE4.exe", "-carla-rpc-port=2031"], cwd="C:\\a b")
    m = re.search(r"CommandLine = ('(?:[^']|'')*')", sp)
    assert m and ps_unquote(m.group(1)) == '"C:\\a b\\CarlaUE4.exe" -carla-rpc-port=2031'
    assert "Win32_Process -MethodName Create" in sp


def test_interpret_markers():
    spawn = Result(("x",), ps.SPAWN_RC, stderr=ps.SPAWN_MARKER + "The system cannot find the file specified\n")
    r = ps.interpret(spawn)
    assert r.rc is None and r.error == "spawn: The system cannot find the file specified"
    to = ps.interpret(Result(("x",), 124, stderr=ps.TIMEOUT_MARKER + "deadline 6.0 s, killed process tree 42\n"))
    assert to.timed_out and to.rc is None and "killed process tree 42" in to.error
    own = ps.interpret(Result(("x",), 127, stderr="the program's own 127\n"))
    assert own.rc == 127 and own.error is None
    clixml = "#< CLIXML\r\n<Objs Version=\"1.1.0.1\"><Obj S=\"progress\"/></Objs>real error\n"
    assert ps.interpret(Result(("x",), 1, stderr=clixml)).stderr == "real error\n"
    lost = Result(("x",), None, error="transport: gone")
    assert ps.interpret(lost) is lost
