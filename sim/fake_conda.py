"""The fake `conda`: `conda run` as a wrapper process around a child, and `conda env list --json`.

    conda run (-n ENV | -p PREFIX) [--cwd DIR] [--no-capture-output | --live-stream] CMD [ARGS...]
    conda env list [--json]        conda info --envs [--json]        conda --version

The traps it keeps from the real one (conda 26.x `conda run`, design.md §4), on purpose:
- the process tree: conda's python (whose cmdline holds the inner command: `pgrep -f evaluator` matches
  it too) → `/usr/bin/bash /tmp/tmpXXXX` (a generated script; it first runs a short-lived
  `conda shell.posix hook`) → the command. The script is removed when the command ends;
- SIGTERM to conda is not forwarded: conda dies, bash and the command run on, re-parented; conda killed
  during start-up still lets its bash start the command;
- a command killed by signal N makes bash, and so conda, exit 128+N;
- without --no-capture-output the child's output is captured and printed only when it exits (a
  log file fed that way has a frozen mtime for the whole run), and stdin is swallowed (`conda run ...
  python3 - <<EOF` runs nothing and exits 0); with it, stdin is inherited;
- `python`/`python3` resolve to the env's interpreter; PATH, CONDA_PREFIX, CONDA_DEFAULT_ENV are
  set as activation would; an unknown env is `EnvironmentLocationNotFound`, rc 1.

Envs come from D/sim/envs.json (written by rig.up). D/sim/conda.mode `hang` makes every call hang.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sim.layout import SimLayout, read_json, read_mode

CONDA_VERSION = "24.7.1"
MODES = ("ok", "hang")
USAGE_RUN = ("usage: conda run [-h] [-v] [--dev] [--debug-wrapper-scripts] [--cwd CWD] "
             "[--no-capture-output] [-n ENVIRONMENT | -p PATH] ...")


@dataclass(frozen=True)
class Env:
    name: str
    prefix: str
    python: str
    pythonpath: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunArgs:
    name: str | None = None
    prefix: str | None = None
    cwd: str | None = None
    capture: bool = True
    command: tuple[str, ...] = field(default_factory=tuple)


class CondaError(Exception):
    def __init__(self, message: str, rc: int = 1) -> None:
        super().__init__(message)
        self.rc = rc


def load_envs(layout: SimLayout) -> tuple[str, dict[str, Env]]:
    raw = read_json(layout.envs_json, None)
    if raw is None:
        raise CondaError(f"[sim] no {layout.envs_json}: run `sim up` first")
    envs = {name: Env(name=name, prefix=str(e["prefix"]), python=str(e["python"]),
                      pythonpath=tuple(e.get("pythonpath") or ()))
            for name, e in raw["envs"].items()}
    return str(raw["root_prefix"]), envs


def parse_run(argv: list[str]) -> RunArgs:
    name = prefix = cwd = None
    capture = True
    i = 0
    while i < len(argv):
        tok = argv[i]
        key, eq, value = tok.partition("=")
        if key in ("-n", "--name", "-p", "--prefix", "--cwd"):
            if not eq:
                i += 1
                if i >= len(argv):
                    raise CondaError(f"{USAGE_RUN}\nconda run: error: argument {key}: expected one argument", 2)
                value = argv[i]
            if key in ("-n", "--name"):
                name = value
            elif key in ("-p", "--prefix"):
                prefix = value
            else:
                cwd = value
        elif tok in ("--no-capture-output", "--live-stream"):
            capture = False
        elif tok in ("-v", "--verbose", "--dev", "--debug-wrapper-scripts"):
            pass
        elif tok.startswith("-"):
            raise CondaError(f"{USAGE_RUN}\nconda: error: unrecognized arguments: {tok}", 2)
        else:
            break
        i += 1
    command = tuple(argv[i:])
    if not command:
        raise CondaError(f"{USAGE_RUN}\nconda run: error: the following arguments are required: executable_call", 2)
    if name and prefix:
        raise CondaError(f"{USAGE_RUN}\nconda run: error: argument -p/--prefix: not allowed with argument -n/--name", 2)
    return RunArgs(name=name, prefix=prefix, cwd=cwd, capture=capture, command=command)


def resolve_env(layout: SimLayout, args: RunArgs) -> Env:
    root, envs = load_envs(layout)
    if args.prefix:
        for env in envs.values():
            if os.path.normpath(env.prefix) == os.path.normpath(args.prefix):
                return env
        raise CondaError(f"\nEnvironmentLocationNotFound: Not a conda environment: {args.prefix}\n")
    name = args.name or "base"
    if name in envs:
        return envs[name]
    raise CondaError(f"\nEnvironmentLocationNotFound: Not a conda environment: {os.path.join(root, 'envs', name)}\n")


def child_env(env: Env, base: dict[str, str]) -> dict[str, str]:
    out = dict(base)
    out["PATH"] = os.pathsep.join([os.path.join(env.prefix, "bin"), base.get("PATH", os.defpath)])
    out["CONDA_PREFIX"] = env.prefix
    out["CONDA_DEFAULT_ENV"] = env.name
    out["CONDA_SHLVL"] = "1"
    if env.pythonpath:
        old = base.get("PYTHONPATH")
        out["PYTHONPATH"] = os.pathsep.join([*env.pythonpath, *([old] if old else [])])
    return out


def run(layout: SimLayout, args: RunArgs) -> int:
    env = resolve_env(layout, args)
    argv = list(args.command)
    if argv[0] in ("python", "python3"):
        argv[0] = env.python
    environ = child_env(env, dict(os.environ))
    if os.sep not in argv[0]:
        found = shutil.which(argv[0], path=environ["PATH"])
        if found is None:
            # The real `conda run` execs the command from a temporary bash script: bash says it.
            print(f"/tmp/tmp_conda_run.sh: line 3: {argv[0]}: command not found", file=sys.stderr)
            return 127
        argv[0] = found
    if args.cwd is not None and not os.path.isdir(args.cwd):
        raise CondaError(f"\nDirectoryNotACondaEnvironmentError: [Errno 2] No such file or directory: {args.cwd!r}\n")

    from sim.procs import register_self
    register_self(layout, "conda")
    script = _wrapper_script(layout, env, argv, args.cwd, environ)
    try:
        # Like conda: bash runs the generated script (the command is bash's child, not exec'd), no
        # signal is forwarded (SIGTERM's default disposition: conda dies, bash and the command live on).
        bash = ["/usr/bin/bash", script]
        if args.capture:
            proc = subprocess.Popen(bash, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            out, err = proc.communicate()
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            sys.stderr.buffer.write(err)
            sys.stderr.flush()
        else:
            proc = subprocess.Popen(bash, env=environ)   # stdin, stdout, stderr: inherited
            proc.wait()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(script)
    return proc.returncode


def _wrapper_script(layout: SimLayout, env: Env, argv: list[str], cwd: str | None,
                    environ: dict[str, str]) -> str:
    """/tmp/tmpXXXX: the activation (a `conda shell.posix hook` child that exits at once), the cwd, the
    command. shlex-quoted: this is the fake of a tool that writes a shell script, not console code."""
    hook = " ".join(shlex.quote(a) for a in (str(layout.conda), "shell.posix", "hook"))
    lines = [f"eval \"$({hook})\"",
             *(f"export {k}={shlex.quote(environ[k])}" for k in ("PATH", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
                                                                   "CONDA_SHLVL", "PYTHONPATH") if k in environ),
             *([f"cd {shlex.quote(cwd)}"] if cwd else []),
             " ".join(shlex.quote(a) for a in argv), ""]
    fd, path = tempfile.mkstemp(prefix="tmp", dir="/tmp")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    return path


def env_list(layout: SimLayout, as_json: bool) -> str:
    root, envs = load_envs(layout)
    prefixes = [root] + sorted(e.prefix for e in envs.values() if e.prefix != root)
    if as_json:
        return json.dumps({"envs": prefixes}, indent=2) + "\n"
    lines = ["# conda environments:", "#"]
    for p in prefixes:
        name = "base" if p == root else Path(p).name
        lines.append(f"{name:<27}{p}")
    return "\n".join(lines) + "\n\n"


def main(argv: list[str], sim_dir: str | os.PathLike[str]) -> int:
    layout = SimLayout.of(sim_dir)
    try:
        mode = read_mode(layout.conda_mode, MODES)
        if mode == "hang":
            from sim.procs import register_self
            register_self(layout, "conda")
            threading.Event().wait()
        if not argv:
            print("usage: conda [-h] [-v] [--no-plugins] [-V] COMMAND ...", file=sys.stderr)
            return 2
        if argv[0] in ("--version", "-V"):
            print(f"conda {CONDA_VERSION}")
            return 0
        if argv[0] == "run":
            return run(layout, parse_run(argv[1:]))
        if argv[:2] == ["shell.posix", "hook"]:
            print("# conda shell hook (sim): activation is done by the script's exports")
            return 0
        if argv[:2] == ["env", "list"] or argv[:2] == ["info", "--envs"] or argv[:2] == ["info", "-e"]:
            sys.stdout.write(env_list(layout, "--json" in argv[2:]))
            return 0
        print(f"[sim] fake conda does not implement: conda {' '.join(argv)}", file=sys.stderr)
        return 2
    except CondaError as exc:
        print(str(exc), file=sys.stderr)
        return exc.rc
    except ValueError as exc:
        print(f"[sim] {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--sim-dir":
        sys.exit(main(sys.argv[3:], sys.argv[2]))
    sys.exit("usage: fake_conda.py --sim-dir D conda-args...")
