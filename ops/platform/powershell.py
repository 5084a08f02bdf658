"""PowerShell script builders shared by the Windows hosts (ssh to Windows OpenSSH, WSL interop).

Why a generated script and `-EncodedCommand`: Windows OpenSSH hands the command line to cmd.exe (or to
PowerShell when DefaultShell is set), and PowerShell 5.1 re-quotes arguments to native programs badly
(embedded `"` are not escaped, empty strings vanish). Base64 of UTF-16LE contains only [A-Za-z0-9+/=],
which passes through cmd.exe, PowerShell and WSL interop untouched, and inside the script every value
is a PowerShell single-quoted literal, where nothing is interpolated.

How argv reaches the program: the script starts it with System.Diagnostics.Process and an
`Arguments` string we build with the MS C runtime rules (`subprocess.list2cmdline`, the rules
CommandLineToArgvW and every MSVC program use to split their command line), so argv arrives exactly.
`.bat`/`.cmd` are refused: cmd.exe re-parses their arguments with different rules (BatBadBut).

Timeouts: the script enforces its own deadline and kills the whole process tree (`taskkill /T /F`),
because neither side can rely on the client: a killed WSL interop stub does not stop the Windows
process, and a lost SSH session is not guaranteed to either.

Markers: the script reports its own failures on stderr with a marker line, so the host can tell "the
program could not be started" / "the script's deadline hit" from the program's own exit codes.
"""
from __future__ import annotations

import base64
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ops.platform.base import Result

SPAWN_MARKER = "carla-console-spawn-error: "
TIMEOUT_MARKER = "carla-console-timeout: "
SPAWN_RC = 127
TIMEOUT_RC = 124

# PowerShell's tokenizer treats these as single quotes too (the typographic ones included), so each
# must be doubled inside a single-quoted literal, not only the ASCII apostrophe.
_PS_SINGLE_QUOTES = ("'", "\u2018", "\u2019", "\u201a", "\u201b")


def ps_quote(s: str) -> str:
    """`s` as a PowerShell single-quoted literal: no `$`, backtick or `"` is special inside one."""
    if "\x00" in s:
        raise ValueError("a NUL character cannot be passed to PowerShell")
    out = s
    for q in _PS_SINGLE_QUOTES:
        out = out.replace(q, q + q)
    return "'" + out + "'"


def windows_cmdline(args: Sequence[str]) -> str:
    """argv as one Windows command-line string (MS C runtime quoting), what CreateProcess wants."""
    for a in args:
        if "\x00" in a:
            raise ValueError("a NUL character cannot be passed on a Windows command line")
    return subprocess.list2cmdline(list(args))


def _check_exe(exe: str) -> None:
    low = exe.lower().rstrip(" .")
    if low.endswith((".bat", ".cmd")):
        raise ValueError(f"refusing to run a batch file ({exe}): cmd.exe re-parses its arguments; "
                         "run the program it starts instead")


# The part that emits a string as UTF-8 bytes on a standard stream. We write raw bytes so the console
# code page of the remote session (OEM 437/936/...) cannot mangle what we decode as UTF-8.
_WRITE_FN = """function __cc_write([System.IO.Stream]$s, [string]$t) {
  if ($t) { $b = (New-Object System.Text.UTF8Encoding $false).GetBytes($t); $s.Write($b, 0, $b.Length) }
  $s.Flush()
}"""


def ps_invoke_argv(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                   timeout_s: float | None = None) -> str:
    """A PowerShell script that runs argv[0] with exactly argv[1:], relays its stdout/stderr as UTF-8,
    exits with its exit code, and on `timeout_s` kills its whole process tree and exits 124.

    env entries are added to the inherited environment (same rule as every other host); cwd, when
    given, is the child's working directory.
    """
    if not argv:
        raise ValueError("empty argv")
    _check_exe(argv[0])
    lines = [
        "$ErrorActionPreference = 'Stop'",
        "$ProgressPreference = 'SilentlyContinue'",  # progress records would come out as CLIXML on stderr
        _WRITE_FN,
        "$__err = [Console]::OpenStandardError()",
        "$psi = New-Object System.Diagnostics.ProcessStartInfo",
        f"$psi.FileName = {ps_quote(argv[0])}",
        f"$psi.Arguments = {ps_quote(windows_cmdline(argv[1:]))}",
        "$psi.UseShellExecute = $false",
        "$psi.CreateNoWindow = $true",
        "$psi.RedirectStandardInput = $true",  # closed at once: the child sees EOF, never our stdin
        "$psi.RedirectStandardOutput = $true",
        "$psi.RedirectStandardError = $true",
    ]
    if cwd is not None:
        lines.append(f"$psi.WorkingDirectory = {ps_quote(cwd)}")
    for k, v in (env or {}).items():
        if not k or "=" in k:
            raise ValueError(f"invalid environment variable name: {k!r}")
        lines.append(f"$psi.EnvironmentVariables[{ps_quote(k)}] = {ps_quote(v)}")
    ms = -1 if timeout_s is None else max(1, int(timeout_s * 1000))
    lines += [
        "try { $p = [System.Diagnostics.Process]::Start($psi) }",
        "catch { __cc_write $__err ('" + SPAWN_MARKER + "' + $_.Exception.Message + \"`n\"); "
        f"exit {SPAWN_RC} }}",
        "$p.StandardInput.Close()",
        # Read both pipes asynchronously: reading one to the end first can deadlock on the other.
        "$o = $p.StandardOutput.ReadToEndAsync()",
        "$e = $p.StandardError.ReadToEndAsync()",
        f"if (-not $p.WaitForExit({ms})) {{",
        "  & taskkill.exe /T /F /PID $p.Id 2>&1 | Out-Null",
        "  __cc_write $__err ('" + TIMEOUT_MARKER + f"deadline {timeout_s} s, killed process tree ' + "
        "$p.Id + \"`n\")",
        f"  exit {TIMEOUT_RC}",
        "}",
        "$p.WaitForExit()",  # the no-argument overload also waits for the redirected streams' EOF
        "__cc_write ([Console]::OpenStandardOutput()) $o.Result",
        "__cc_write $__err $e.Result",
        "exit $p.ExitCode",
    ]
    return "\n".join(lines) + "\n"


def ps_run_script(script: str, *, timeout_s: float | None = None) -> str:
    """Wrap a PowerShell script (cmdlets, e.g. `Get-CimInstance ... | ConvertTo-Json`) so it runs in a
    runspace with a deadline: its output is rendered with Out-String, written as UTF-8; its error
    records go to stderr and make the exit code 1; past the deadline the process exits 124.
    Native programs the script starts are not tracked: use ps_invoke_argv for those.
    """
    ms = -1 if timeout_s is None else max(1, int(timeout_s * 1000))
    return "\n".join([
        "$ErrorActionPreference = 'Stop'",
        "$ProgressPreference = 'SilentlyContinue'",
        _WRITE_FN,
        "$__err = [Console]::OpenStandardError()",
        "$__ps = [PowerShell]::Create()",
        f"[void]$__ps.AddScript({ps_quote(script)})",
        "[void]$__ps.AddCommand('Out-String').AddParameter('Width', 65536)",
        "$__h = $__ps.BeginInvoke()",
        f"if (-not $__h.AsyncWaitHandle.WaitOne({ms})) {{",
        "  __cc_write $__err ('" + TIMEOUT_MARKER + f"deadline {timeout_s} s' + \"`n\")",
        f"  [Environment]::Exit({TIMEOUT_RC})",
        "}",
        "try { $__out = $__ps.EndInvoke($__h) }",
        "catch { __cc_write $__err ($_.Exception.Message + \"`n\"); exit 1 }",
        "__cc_write ([Console]::OpenStandardOutput()) (($__out | ForEach-Object { $_ }) -join '')",
        "$__rc = 0",
        "foreach ($__r in $__ps.Streams.Error) { __cc_write $__err ($__r.ToString() + \"`n\"); $__rc = 1 }",
        "exit $__rc",
    ]) + "\n"


def ps_spawn_detached(argv: Sequence[str], *, cwd: str | None = None) -> str:
    """A script that starts argv outside the caller's job object and prints the new pid.

    Win32_Process.Create runs the process from the WMI service, so it survives the SSH session (Windows
    OpenSSH kills the session's job object when the session ends) and the WSL interop stub.
    Output cannot be redirected this way: CARLA's shipping build writes no log anyway.
    """
    if not argv:
        raise ValueError("empty argv")
    _check_exe(argv[0])
    args = f"@{{CommandLine = {ps_quote(windows_cmdline(argv))}"
    if cwd is not None:
        args += f"; CurrentDirectory = {ps_quote(cwd)}"
    args += "}"
    return "\n".join([
        "$ErrorActionPreference = 'Stop'",
        "$ProgressPreference = 'SilentlyContinue'",
        f"$r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments {args}",
        "if ($r.ReturnValue -ne 0) { [Console]::Error.WriteLine('" + SPAWN_MARKER
        + "Win32_Process.Create returned ' + $r.ReturnValue); exit " + str(SPAWN_RC) + " }",
        "[Console]::Out.WriteLine($r.ProcessId)",
    ]) + "\n"


def encode_command(script: str) -> str:
    """The value for `powershell.exe -EncodedCommand`: base64 of the script in UTF-16LE."""
    return base64.b64encode(script.encode("utf-16-le")).decode("ascii")


def decode_command(b64: str) -> str:
    """Inverse of encode_command (for tests and for showing an operator what will run)."""
    return base64.b64decode(b64).decode("utf-16-le")


def powershell_argv(script: str, exe: str = "powershell.exe") -> list[str]:
    """The argv that runs `script` non-interactively, with no profile (profiles are slow and vary)."""
    return [exe, "-NoProfile", "-NonInteractive", "-EncodedCommand", encode_command(script)]


def strip_clixml(stderr: str) -> str:
    """Drop the `#< CLIXML` block powershell.exe writes on a redirected stderr (progress records)."""
    if not stderr.lstrip().startswith("#< CLIXML"):
        return stderr
    rest = stderr.lstrip()[len("#< CLIXML"):]
    end = rest.find("</Objs>")
    return rest[end + len("</Objs>"):].lstrip("\r\n") if end >= 0 else ""


def interpret(res: Result) -> Result:
    """Map our script's markers to Result fields: spawn failure -> rc None + 'spawn: ...', the
    script's own deadline -> timed_out. Everything else passes through (stderr cleaned of CLIXML)."""
    if res.rc is None:
        return res
    err = strip_clixml(res.stderr)
    first = next((ln for ln in err.splitlines() if ln.startswith((SPAWN_MARKER, TIMEOUT_MARKER))), None)
    if res.rc == SPAWN_RC and first and first.startswith(SPAWN_MARKER):
        return replace(res, rc=None, stderr=err, error="spawn: " + first[len(SPAWN_MARKER):].strip())
    if res.rc == TIMEOUT_RC and first and first.startswith(TIMEOUT_MARKER):
        return replace(res, rc=None, stderr=err, timed_out=True,
                       error="timeout on the host: " + first[len(TIMEOUT_MARKER):].strip())
    return replace(res, stderr=err)
