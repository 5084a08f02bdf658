"""What makes a process a side's own: its PROGRAM and its exact tokens, not the tokens alone.

A `watch pgrep -af -- -carla-rpc-port=N` carries the server's marker, and a tmux server keeps the argv of
the command that started it (`tmux new -d python leaderboard_evaluator.py --port N ...`): both "had the
tokens", one was shown as the side's server and killed by reclaim, the other became the root of a chain
and recover stopped the whole tmux server. So:

- a side's **server** is the configured launcher (`server.command[0]`, e.g. CarlaUE4.sh / CarlaUE4.exe)
  or its shipping binary (`<stem>-Linux-Shipping`, `<stem>-Win64-Shipping.exe`), run directly or by an
  interpreter (`/bin/sh CarlaUE4.sh`), carrying the side's `-carla-rpc-port=N` token;
- a side's **evaluator** is an interpreter (`python*`, or the evaluator's configured `python`) running the
  side's script, with the side's `--port N` and `--traffic-manager-port T`;
- a **wrapper** is `conda run -n <the side's env> ...` carrying those tokens and the script;
- a **harness** is `... -c RIG harness SIDE` for this rig (its path, or a copy of the rig file: same rig
  name and the same side's ports).
"""
from __future__ import annotations

import functools
import ntpath
import os

from ops.model import EvaluatorConfig, RigConfig, SideConfig
from ops.platform.procs import Proc

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "env", "cmd", "powershell", "pwsh"})
# Interpreter options that take the next token as their value (python -X dev, -W ignore).
_OPT_WITH_VALUE = frozenset({"-X", "-W", "-Q"})
_NOT_A_SCRIPT = frozenset({"-c", "-m", "-"})


@functools.lru_cache(maxsize=4096)
def base(token: str) -> str:
    """The program name of an argv token, for POSIX or Windows paths, case-folded, `.exe` kept. Cached: a
    poll asks it of the same few hundred tokens every second (ntpath's split was a tenth of a poll)."""
    return ntpath.basename(token).casefold()


def _is_interpreter(name: str, extra: frozenset[str] = frozenset()) -> bool:
    stem = name[:-4] if name.endswith(".exe") else name
    return stem.startswith("python") or stem in _SHELLS or name in extra


def program_of(argv: tuple[str, ...], interpreters: frozenset[str] = frozenset()) -> str | None:
    """What argv runs: argv[0], or the script an interpreter runs (its first non-option argument); None
    for an interpreter given code (`-c`, `-m`, stdin) rather than a file."""
    if not argv:
        return None
    first = base(argv[0])
    if not _is_interpreter(first, interpreters):
        return first
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok in _NOT_A_SCRIPT:
            return None
        if tok in _OPT_WITH_VALUE:
            i += 2
            continue
        if tok.startswith("-"):
            i += 1
            continue
        return base(tok)
    return None


@functools.lru_cache(maxsize=64)
def server_programs(command: tuple[str, ...]) -> frozenset[str]:
    """The program names a side's server runs as: the launcher, and the shipping binary it starts."""
    if not command:
        return frozenset()
    launcher = program_of(tuple(command)) or base(command[0])
    stem = launcher.rsplit(".", 1)[0] if launcher.endswith((".sh", ".exe", ".bat", ".cmd")) else launcher
    return frozenset({launcher, f"{stem}-linux-shipping", f"{stem}-win64-shipping.exe",
                      f"{stem}-win64-shipping"})


def is_server_program(p: Proc, command: tuple[str, ...]) -> bool:
    return program_of(p.cmdline or ()) in server_programs(tuple(command))


def _python_names(ev: EvaluatorConfig) -> frozenset[str]:
    return frozenset({base(ev.python)})


def runs_script(p: Proc, ev: EvaluatorConfig) -> bool:
    """An interpreter running the evaluator's script (compared by file name: the script may be given
    relative to the evaluator's cwd or absolute)."""
    return program_of(p.cmdline or (), _python_names(ev)) == base(ev.script)


def _has_script(p: Proc, ev: EvaluatorConfig) -> bool:
    name = base(ev.script)
    return any(base(a) == name for a in p.cmdline or ())


def is_wrapper_of(p: Proc, ev: EvaluatorConfig) -> bool:
    """`conda run -n ENV ... python SCRIPT ...` for this side's env (the tokens are checked by the caller)."""
    argv = p.cmdline or ()
    if "run" not in argv[:4] or not (p.has_pair("-n", ev.conda_env) or p.has_pair("--name", ev.conda_env)):
        return False
    return _has_script(p, ev)


def harness_side_tokens(p: Proc, side: str) -> str | None:
    """The config path of a `... -c PATH harness SIDE` process, or None when it is not one."""
    argv = p.cmdline or ()
    pairs = list(zip(argv, argv[1:]))
    if ("harness", side) not in pairs:
        return None
    return next((b for a, b in pairs if a in ("-c", "--config")), None)


def is_harness_of(p: Proc, rig: RigConfig, side: SideConfig, local: bool = True) -> bool:
    """A harness of this side: started with this rig file, or with a copy of it (same rig name, the same
    side on the same ports) — a copy's harness races a recovery just the same."""
    path = harness_side_tokens(p, side.name)
    if path is None:
        return False
    if path == rig.path:
        return True
    if not local:
        return False
    cwd = _cwd(p.pid)
    full = path if os.path.isabs(path) or cwd is None else os.path.join(cwd, path)
    return _same_rig(p.pid, p.create_time, full, rig.name, side.name, side.server.rpc_port,
                     side.evaluator.tm_port)


def _cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


@functools.lru_cache(maxsize=256)
def _same_rig(pid: int, create_time: float, path: str, name: str, side: str, rpc: int, tm: int) -> bool:
    """Cached per process (pid + create time): a process's argv does not change, and the file is read once."""
    from ops.config import ConfigError, load_config
    try:
        other = load_config(path)
    except (ConfigError, OSError, ValueError):
        return False
    s = other.sides.get(side)
    return other.name == name and s is not None and s.server.rpc_port == rpc and s.evaluator.tm_port == tm


def is_evaluator_of(p: Proc, side: SideConfig) -> bool:
    """The side's evaluator program with its RPC port and TM port, both as whole tokens."""
    return has_side_ports(p, side) and runs_script(p, side.evaluator)


def has_side_ports(p: Proc, side: SideConfig) -> bool:
    """The side's RPC port and TM port, both as whole tokens: either alone could be a stranger."""
    return (p.has_pair("--port", str(side.server.rpc_port))
            and p.has_pair("--traffic-manager-port", str(side.evaluator.tm_port)))
