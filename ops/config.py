"""Load a rig's YAML into frozen values (ops/model.py); every mistake names file, line and key.

The loader walks the composed YAML node tree rather than the plain dict, because only nodes know their
line: an operator told "sides.A.evaluator.tm_port (line 31)" fixes it in seconds.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ops.model import (
    EvaluatorConfig,
    HeartbeatConfig,
    HostConfig,
    ResourcesConfig,
    RigConfig,
    ServerConfig,
    SideConfig,
    SlurmConfig,
    SupervisorConfig,
    debug_level,
)
from ops.platform.bounded import read_regular

MAX_CONFIG_BYTES = 1 << 20   # a rig file is a few KB; a bigger one (or /dev/zero) is not read whole
# Evaluator arguments the console sets itself: letting config set them would let two sides share a server
# or a TrafficManager, or trip the `--resume type=bool` trap.
OWNED_ARGS = ("port", "traffic-manager-port", "checkpoint", "resume", "routes", "host")


@dataclass(frozen=True)
class ConfigIssue:
    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(Exception):
    def __init__(self, issues: list[ConfigIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "carla-console" / "rig.yaml"


class _Reader:
    """Walks YAML nodes, collecting every issue instead of stopping at the first."""

    def __init__(self, file: str):
        self.file = file
        self.issues: list[ConfigIssue] = []

    def err(self, node: yaml.Node | None, key: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else None
        self.issues.append(ConfigIssue(self.file, line, key, message))

    def mapping(self, node: yaml.Node, key: str, allowed: dict[str, bool]) -> dict[str, yaml.Node] | None:
        """allowed: key -> required."""
        if not isinstance(node, yaml.MappingNode):
            self.err(node, key, f"must be a mapping, got {_kind(node)}")
            return None
        out: dict[str, yaml.Node] = {}
        for k_node, v_node in node.value:
            k = k_node.value if isinstance(k_node, yaml.ScalarNode) else str(k_node)
            path = f"{key}.{k}" if key else k
            if k in out:
                self.err(k_node, path, "duplicate key")
            elif k not in allowed:
                self.err(k_node, path, f"unknown key (allowed: {', '.join(sorted(allowed))})")
            else:
                out[k] = v_node
        for k, required in allowed.items():
            if required and k not in out:
                self.err(node, f"{key}.{k}" if key else k, "missing required key")
        return out

    def names(self, node: yaml.Node, key: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """A mapping of user-chosen names (hosts, sides)."""
        if not isinstance(node, yaml.MappingNode):
            self.err(node, key, f"must be a mapping, got {_kind(node)}")
            return []
        seen: set[str] = set()
        out = []
        for k_node, v_node in node.value:
            k = str(k_node.value)
            if k in seen:
                self.err(k_node, f"{key}.{k}", "duplicate name")
                continue
            if not k or not all(c.isalnum() or c in "-_" for c in k):
                self.err(k_node, f"{key}.{k}", "names may hold letters, digits, '-' and '_' only")
                continue
            seen.add(k)
            out.append((k, k_node, v_node))
        return out

    def scalar(self, node: yaml.Node, key: str, kind: type, conv: Callable[[Any], Any] | None = None,
               check: Callable[[Any], str | None] | None = None) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self.err(node, key, f"must be {_type_word(kind)}, got {_kind(node)}")
            return None
        try:
            value = _construct(node)
        except (ValueError, OverflowError, yaml.YAMLError) as e:   # e.g. an int of 5,000 digits
            self.err(node, key, f"unreadable value: {e}")
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.err(node, key, f"must be a finite number, got {value!r}")
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool) and conv is str:
            value = str(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.err(node, key, f"must be {_type_word(kind)}, got {value!r}")
            return None
        if check is not None:
            problem = check(value)
            if problem:
                self.err(node, key, problem)
                return None
        return conv(value) if conv else value

    def seq(self, node: yaml.Node, key: str, kind: type, conv: Callable[[Any], Any] | None = None,
            check: Callable[[Any], str | None] | None = None, nonempty: bool = False) -> tuple | None:
        if not isinstance(node, yaml.SequenceNode):
            self.err(node, key, f"must be a list, got {_kind(node)}")
            return None
        if nonempty and not node.value:
            self.err(node, key, "must not be empty")
            return None
        items = [self.scalar(n, f"{key}[{i}]", kind, conv, check) for i, n in enumerate(node.value)]
        return None if any(i is None for i in items) else tuple(items)


def _construct(node: yaml.ScalarNode) -> Any:
    """The value YAML's safe loader gives a scalar node (an empty value is None, like `~`)."""
    return yaml.SafeLoader("").construct_object(node, deep=True)


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value) if isinstance(node, yaml.ScalarNode) else type(node).__name__


def _type_word(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(kind, kind.__name__)


def _port(v: int) -> str | None:
    # N+2 must stay a valid port too.
    return None if 1 <= v <= 65533 else f"port {v} is outside 1..65533"


# Every number a rig sets, by key name, with the range an operator could mean: a poll every 1e-9 s, a
# million attempts or a week-long probe timeout is a typo, and it reaches loops and timers. The one place
# that says what is sane (a new numeric key adds its line here and reads it with `_within(name)`).
LIMITS: dict[str, tuple[float, float]] = {
    "poll_s": (0.01, 3600.0),
    "connect_timeout_s": (0.1, 600.0),
    "start_wait_s": (0.1, 3600.0),
    "probe_timeout_s": (0.05, 600.0),
    "stall_s": (0.1, 7 * 86400.0),
    "max_attempts": (1, 1000),
    "vram_min_delta_mb": (1, 1 << 20),
    "adapter": (0, 63),
    "expect_wall_game_min": (0.001, 10000.0),
    "vram_budget_mb": (1, 1 << 20),
    "memory_floor_mb": (1, 1 << 30),
    "disk_warning_mb": (1, 1 << 40),
    "disk_critical_mb": (1, 1 << 40),
    "preflight_timeout_s": (0.1, 3600.0),
    "hung_probes": (1, 1000),
    "hung_after_s": (0, 86400.0),
    "watch_s": (0.05, 3600.0),
    "unknown_wait_s": (0.1, 7 * 86400.0),
    "max_recoveries": (0, 10000),
    "max_route_recoveries": (0, 10000),
    "server_restarts_per_hour": (0, 1000),
    "quarantine_after": (0, 1000),
}


def _within(name: str) -> Callable[[Any], str | None]:
    lo, hi = LIMITS[name]

    def check(v: float) -> str | None:
        if lo <= v <= hi:
            return None
        if lo > 0 >= v:
            return f"must be > 0, got {v!r} (between {lo:g} and {hi:g})"
        return f"must be between {lo:g} and {hi:g}, got {v!r}"
    return check


def _expand(path: str, base: Path) -> str:
    p = os.path.expanduser(os.path.expandvars(path))
    return p if os.path.isabs(p) else str((base / p).resolve())


_HOST_KEYS = {"type": True, "os": False, "address": False, "port": False, "user": False, "known_hosts": False,
              "client_keys": False, "connect_timeout_s": False, "powershell": False, "nvidia_smi": False,
              "netsh": False, "vram_source": False, "memory_floor_mb": False,
              "console_python": False}
_SERVER_KEYS = {"host": True, "command": True, "rpc_port": True, "adapter": False, "adapter_candidates": False,
                "vram_min_delta_mb": False, "start_wait_s": False, "probe_timeout_s": False,
                "managed_by_evaluator": False, "auto_start": False, "hung_probes": False, "hung_after_s": False}
_EVAL_KEYS = {"host": True, "conda_env": True, "cwd": True, "script": True, "routes": True, "checkpoint": True,
              "log": True, "tm_port": False, "args": False, "env": False, "max_attempts": False, "python": False,
              "debug_run": False, "share_server_gpu": False}
_SIDE_KEYS = {"server": True, "evaluator": True, "heartbeat": False, "expect_wall_game_min": False,
              "vram_budget_mb": False, "supervisor": False}
_SUPERVISOR_KEYS = {"auto": False, "watch_s": False, "max_recoveries": False, "max_route_recoveries": False,
                    "server_restarts_per_hour": False, "quarantine_after": False, "unknown_wait_s": False,
                    "bell": False}
_TOP_KEYS = {"version": True, "name": False, "state_dir": False, "conda": False, "poll_s": False,
             "hosts": True, "sides": True, "engine": False, "slurm": False,
             "resources": False, "notify": False}
_SLURM_KEYS = {"host": False, "cluster": False, "conf": False, "partition": False, "gres": False, "time_limit": False,
               "requeue_budget": False, "array_throttle": False, "sbatch_args": False, "python": False}
ENGINES = ("process", "slurm")
_RESOURCES_KEYS = {"disk_warning_mb": False, "disk_critical_mb": False, "memory_floor_mb": False,
                   "preflight_timeout_s": False}


def _read_host(r: _Reader, name: str, node: yaml.Node, base: Path) -> HostConfig | None:
    key = f"hosts.{name}"
    n_issues = len(r.issues)
    m = r.mapping(node, key, _HOST_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = {"name": name}
    kw["type"] = r.scalar(m["type"], f"{key}.type", str, check=lambda v: None if v in ("local", "ssh", "wsl-interop")
                          else f"must be one of local, ssh, wsl-interop, got {v!r}") if "type" in m else None
    default_os = "windows" if kw["type"] == "wsl-interop" else "linux"
    kw["os"] = r.scalar(m["os"], f"{key}.os", str, check=lambda v: None if v in ("linux", "windows")
                        else f"must be linux or windows, got {v!r}") if "os" in m else default_os
    if "address" in m:
        kw["address"] = r.scalar(m["address"], f"{key}.address", str)
    elif kw["type"] == "ssh":
        r.err(node, f"{key}.address", "an ssh host needs an address (a name, an IP, or \"@gateway\")")
    if "port" in m:
        kw["port"] = r.scalar(m["port"], f"{key}.port", int, check=_port)
    if "user" in m:
        kw["user"] = r.scalar(m["user"], f"{key}.user", str)
    if "known_hosts" in m:
        v = r.scalar(m["known_hosts"], f"{key}.known_hosts", str)
        kw["known_hosts"] = _expand(v, base) if v else None
    if "client_keys" in m:
        v = r.seq(m["client_keys"], f"{key}.client_keys", str)
        kw["client_keys"] = tuple(_expand(p, base) for p in v) if v else None
    if "connect_timeout_s" in m:
        kw["connect_timeout_s"] = r.scalar(m["connect_timeout_s"], f"{key}.connect_timeout_s", float,
                                           check=_within("connect_timeout_s"))
    if "powershell" in m:
        kw["powershell"] = r.scalar(m["powershell"], f"{key}.powershell", str)
    for tool in ("nvidia_smi", "netsh"):
        if tool in m:
            kw[tool] = _argv(r, m[tool], f"{key}.{tool}")
    if "vram_source" in m:
        kw["vram_source"] = r.scalar(m["vram_source"], f"{key}.vram_source", str, check=lambda v: None if v in (
            "auto", "nvml", "nvidia-smi") else f"must be auto, nvml or nvidia-smi, got {v!r}")
    if "memory_floor_mb" in m:
        kw["memory_floor_mb"] = r.scalar(m["memory_floor_mb"], f"{key}.memory_floor_mb", int,
                                        check=_within("memory_floor_mb"))
    if "console_python" in m:
        kw["console_python"] = r.scalar(m["console_python"], f"{key}.console_python", str)
    if len(r.issues) > n_issues:
        return None
    return HostConfig(**kw)


def _argv(r: _Reader, node: yaml.Node, key: str) -> tuple[str, ...] | None:
    """A command: a list of strings, or one string naming the program (never split on spaces)."""
    if isinstance(node, yaml.ScalarNode):
        v = r.scalar(node, key, str)
        return (v,) if v else None
    return r.seq(node, key, str, nonempty=True)


def _read_server(r: _Reader, key: str, node: yaml.Node, seen: dict[str, Any] | None = None) -> ServerConfig | None:
    """`seen` receives every field that parsed, even when another did not (the cross-checks use them)."""
    n_issues = len(r.issues)
    m = r.mapping(node, key, _SERVER_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = seen if seen is not None else {}
    kw["host"] = r.scalar(m["host"], f"{key}.host", str) if "host" in m else None
    kw["command"] = _argv(r, m["command"], f"{key}.command") if "command" in m else None
    if kw["command"]:
        for i, tok in enumerate(kw["command"]):
            if tok.lower().startswith(("-carla-rpc-port", "-graphicsadapter", "-carla-port")):
                r.err(m["command"], f"{key}.command[{i}]", f"{tok!r} is set by the console "
                      "(from rpc_port and the adapter); remove it")
    kw["rpc_port"] = r.scalar(m["rpc_port"], f"{key}.rpc_port", int, check=_port) if "rpc_port" in m else None
    if "adapter" in m:
        kw["adapter"] = r.scalar(m["adapter"], f"{key}.adapter", int, check=_within("adapter"))
    if "adapter_candidates" in m:
        kw["adapter_candidates"] = r.seq(m["adapter_candidates"], f"{key}.adapter_candidates", int, nonempty=True,
                                         check=_within("adapter"))
    if "vram_min_delta_mb" in m:
        kw["vram_min_delta_mb"] = r.scalar(m["vram_min_delta_mb"], f"{key}.vram_min_delta_mb", int,
                                              check=_within("vram_min_delta_mb"))
    for k in ("start_wait_s", "probe_timeout_s"):
        if k in m:
            kw[k] = r.scalar(m[k], f"{key}.{k}", float, check=_within(k))
    # HUNG (K consecutive unanswered rpc probes over at least T s): one block, with its defaults in the model.
    if "hung_probes" in m:
        kw["hung_probes"] = r.scalar(m["hung_probes"], f"{key}.hung_probes", int, check=_within("hung_probes"))
    if "hung_after_s" in m:
        kw["hung_after_s"] = r.scalar(m["hung_after_s"], f"{key}.hung_after_s", float,
                                      check=_within("hung_after_s"))
    for flag in ("managed_by_evaluator", "auto_start"):
        if flag in m:
            kw[flag] = r.scalar(m[flag], f"{key}.{flag}", bool)
    if len(r.issues) > n_issues:
        return None
    return ServerConfig(**kw)


def _flat_value(v: Any) -> str | None:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (int, float, str)):
        return str(v)
    return None


def _read_pairs(r: _Reader, node: yaml.Node, key: str,
                check: Callable[[str, str], str | None] | None = None) -> tuple[tuple[str, str], ...] | None:
    """A flat mapping of names to strings (evaluator args, env); `check(name, value)` names a problem."""
    if not isinstance(node, yaml.MappingNode):
        r.err(node, key, f"must be a mapping, got {_kind(node)}")
        return None
    out = []
    bad = False
    for k_node, v_node in node.value:
        k = str(k_node.value) if isinstance(k_node, yaml.ScalarNode) else _kind(k_node)
        if not isinstance(k_node, yaml.ScalarNode) or not isinstance(v_node, yaml.ScalarNode):
            r.err(v_node, f"{key}.{k}", f"must be a string or number, got {_kind(v_node)}")
            bad = True
            continue
        try:
            value = _flat_value(_construct(v_node))
        except (ValueError, OverflowError, yaml.YAMLError) as e:
            r.err(v_node, f"{key}.{k}", f"unreadable value: {e}")
            bad = True
            continue
        if value is None:
            r.err(v_node, f"{key}.{k}", "must be a finite string or number (null, .inf and .nan are not allowed)")
            bad = True
            continue
        problem = check(k, value) if check is not None else None
        if problem:
            r.err(k_node, f"{key}.{k}", problem)
            bad = True
            continue
        out.append((k, value))
    return None if bad else tuple(out)


_ARG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+([eE][-+]?\d+)?")


def owned_flag(name: str) -> str | None:
    """The console-owned flag argparse would read `--name` as: the flag itself, `--flag=value`, an
    unambiguous prefix (allow_abbrev: `--po` is `--port`, `--resum` is `--resume`), or an ambiguous one
    (argparse refuses it, and so do we: the evaluator's parser is not ours to know)."""
    bare = name.lstrip("-").split("=", 1)[0]
    for form in {bare, bare.replace("_", "-")}:
        for owned in OWNED_ARGS:
            if form and owned.startswith(form):
                return owned
    return None


def _arg_problem(name: str, value: str) -> str | None:
    """Why an evaluator argument may not pass: it would set what the console owns, or smuggle an option."""
    bare = name.lstrip("-")
    owned = owned_flag(name)
    if owned is not None:
        how = "" if bare.replace("_", "-") == owned else f": argparse reads --{bare} as --{owned} (a prefix or =value)"
        return (f"--{bare} is set by the console{how} (from the side's ports, checkpoint, routes and the resume "
                "rule); remove it")
    if not _ARG_NAME.fullmatch(bare):
        return (f"an argument name holds letters, digits, '-', '_' and '.' only, got {name!r} "
                "('=', spaces or an empty name would pass another option)")
    if "\x00" in value:
        return "the value holds a NUL byte"
    if value.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(value):
        return (f"the value {value!r} starts with '-': argparse reads it as an option, not as the value of "
                f"--{bare}")
    return None


def _env_problem(name: str, value: str) -> str | None:
    if not name or "=" in name or "\x00" in name:
        return f"an environment variable name may not be empty or hold '=' or NUL, got {name!r}"
    if "\x00" in value:
        return "the value holds a NUL byte"
    return None


def _read_evaluator(r: _Reader, key: str, node: yaml.Node, base: Path,
                    seen: dict[str, Any] | None = None) -> EvaluatorConfig | None:
    """`seen` receives every field that parsed, even when another did not (the cross-checks use them)."""
    n_issues = len(r.issues)
    m = r.mapping(node, key, _EVAL_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = seen if seen is not None else {}
    for k in ("host", "conda_env", "cwd", "script", "routes", "checkpoint", "log"):
        if k in m:
            kw[k] = r.scalar(m[k], f"{key}.{k}", str, check=lambda v: None if v.strip() else "must not be empty")
    if kw.get("cwd"):
        kw["cwd"] = _expand(kw["cwd"], base)
    if kw.get("conda_env") and not all(c.isalnum() or c in "-_." for c in kw["conda_env"]):
        r.err(m["conda_env"], f"{key}.conda_env", "an env name holds letters, digits, '-', '_' and '.' only")
    if "tm_port" in m:
        kw["tm_port"] = r.scalar(m["tm_port"], f"{key}.tm_port", int, check=_port)
    if "args" in m:
        pairs = _read_pairs(r, m["args"], f"{key}.args", _arg_problem)
        if pairs is not None:
            kw["args"] = tuple((k.lstrip("-"), v) for k, v in pairs)
    if "env" in m:
        pairs = _read_pairs(r, m["env"], f"{key}.env", _env_problem)
        if pairs is not None:
            kw["env"] = pairs
    if "max_attempts" in m:
        kw["max_attempts"] = r.scalar(m["max_attempts"], f"{key}.max_attempts", int, check=_within("max_attempts"))
    if "python" in m:
        kw["python"] = r.scalar(m["python"], f"{key}.python", str)
    for flag in ("debug_run", "share_server_gpu"):
        if flag in m:
            kw[flag] = r.scalar(m[flag], f"{key}.{flag}", bool)
    if len(r.issues) > n_issues or any(kw.get(k) is None for k in ("host", "conda_env", "cwd", "script", "routes",
                                                                     "checkpoint", "log")):
        return None
    return EvaluatorConfig(**kw)


def _read_resources(r: _Reader, node: yaml.Node) -> ResourcesConfig | None:
    m = r.mapping(node, "resources", _RESOURCES_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = {}
    for k in ("disk_warning_mb", "disk_critical_mb", "memory_floor_mb"):
        if k in m:
            kw[k] = r.scalar(m[k], f"resources.{k}", int, check=_within(k))
    if "preflight_timeout_s" in m:
        kw["preflight_timeout_s"] = r.scalar(m["preflight_timeout_s"], "resources.preflight_timeout_s", float,
                                             check=_within("preflight_timeout_s"))
    if any(v is None for v in kw.values()):
        return None
    res = ResourcesConfig(**kw)
    if res.disk_critical_mb > res.disk_warning_mb:
        r.err(m.get("disk_critical_mb") or node, "resources.disk_critical_mb",
              f"{res.disk_critical_mb} is above disk_warning_mb {res.disk_warning_mb}: the critical floor is the "
              "lower one")
        return None
    return res


@dataclass(frozen=True)
class _SideFacts:
    """What parsed of one side's hosts and ports, for the checks that span sides. A side with a type error
    elsewhere keeps its place in them, so one run of check-config reports its undefined host, TM collision
    or port overlap beside the type error (None: that field did not parse, its checks are skipped)."""

    server_host: str | None = None
    evaluator_host: str | None = None
    rpc_port: int | None = None
    tm_port: int | None = None
    adapter: int | None = None
    managed_by_evaluator: bool = False
    debug_level: int = 0
    debug_run: bool = False

    @classmethod
    def of(cls, server: dict[str, Any], evaluator: dict[str, Any]) -> _SideFacts:
        # An absent tm_port is the model's default (8000, the usual collision); a present one that did not
        # parse is None in `evaluator`, hence unknown here.
        tm = evaluator["tm_port"] if "tm_port" in evaluator else EvaluatorConfig.tm_port
        args = evaluator.get("args") or ()
        return cls(server_host=server.get("host"), evaluator_host=evaluator.get("host"),
                   rpc_port=server.get("rpc_port"), tm_port=tm, adapter=server.get("adapter"),
                   managed_by_evaluator=bool(server.get("managed_by_evaluator")),
                   debug_level=debug_level(args), debug_run=bool(evaluator.get("debug_run")))

    @property
    def server_ports(self) -> tuple[int, ...]:
        return () if self.rpc_port is None else (self.rpc_port, self.rpc_port + 1, self.rpc_port + 2)

    @property
    def planned_ports(self) -> tuple[int, ...]:
        return (*self.server_ports, *(() if self.tm_port is None else (self.tm_port,)))


def _read_side(r: _Reader, name: str, node: yaml.Node, base: Path,
               facts: dict[str, _SideFacts] | None = None) -> SideConfig | None:
    """`facts[name]` receives what parsed of the side's hosts and ports, even when the side did not."""
    key = f"sides.{name}"
    m = r.mapping(node, key, _SIDE_KEYS)
    if m is None:
        return None
    server_seen: dict[str, Any] = {}
    evaluator_seen: dict[str, Any] = {}
    server = _read_server(r, f"{key}.server", m["server"], server_seen) if "server" in m else None
    evaluator = (_read_evaluator(r, f"{key}.evaluator", m["evaluator"], base, evaluator_seen)
                 if "evaluator" in m else None)
    if facts is not None:
        facts[name] = _SideFacts.of(server_seen, evaluator_seen)
    heartbeat = HeartbeatConfig()
    if "heartbeat" in m:
        hm = r.mapping(m["heartbeat"], f"{key}.heartbeat", {"stall_s": False})
        if hm and "stall_s" in hm:
            stall = r.scalar(hm["stall_s"], f"{key}.heartbeat.stall_s", float, check=_within("stall_s"))
            if stall is not None:
                heartbeat = HeartbeatConfig(stall_s=stall)
    # The fake-success floor: this side's model cannot run faster than this wall/game ratio (results, status).
    floor = None
    if "expect_wall_game_min" in m:
        floor = r.scalar(m["expect_wall_game_min"], f"{key}.expect_wall_game_min", float,
                         check=_within("expect_wall_game_min"))
    budget = None
    if "vram_budget_mb" in m:
        budget = r.scalar(m["vram_budget_mb"], f"{key}.vram_budget_mb", int, check=_within("vram_budget_mb"))
    supervisor = _read_supervisor(r, f"{key}.supervisor", m["supervisor"]) if "supervisor" in m else SupervisorConfig()
    if server is None or evaluator is None or supervisor is None or ("vram_budget_mb" in m and budget is None):
        return None
    return SideConfig(name=name, server=server, evaluator=evaluator, heartbeat=heartbeat,
                      expect_wall_game_min=floor, vram_budget_mb=budget, supervisor=supervisor)


def _read_supervisor(r: _Reader, key: str, node: yaml.Node) -> SupervisorConfig | None:
    n_issues = len(r.issues)
    m = r.mapping(node, key, _SUPERVISOR_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = {}
    for flag in ("auto", "bell"):
        if flag in m:
            kw[flag] = r.scalar(m[flag], f"{key}.{flag}", bool)
    for k in ("watch_s", "unknown_wait_s"):
        if k in m:
            kw[k] = r.scalar(m[k], f"{key}.{k}", float, check=_within(k))
    for k in ("max_recoveries", "max_route_recoveries", "server_restarts_per_hour", "quarantine_after"):
        if k in m:
            kw[k] = r.scalar(m[k], f"{key}.{k}", int, check=_within(k))
    if len(r.issues) > n_issues:
        return None
    return SupervisorConfig(**kw)


def _host_known(r: _Reader, rig_hosts: dict[str, HostConfig], host: str) -> bool:
    """Defined, or defined with an error of its own (already reported: no second error for its users)."""
    return host in rig_hosts or any(i.key == f"hosts.{host}" or i.key.startswith(f"hosts.{host}.")
                                    for i in r.issues)


def _cross_checks(r: _Reader, rig_hosts: dict[str, HostConfig], sides: dict[str, _SideFacts],
                  nodes: dict[str, yaml.Node]) -> list[str]:
    """Checks that span sides: ports, TM ports, hosts. Returns warnings (not errors).

    They run on what parsed of every side (`_SideFacts`), a side with errors elsewhere included, and skip
    only the fields that did not parse: all errors of a file in one run."""
    warnings: list[str] = []
    for name, side in sides.items():
        snode = nodes[name]
        for role, host in (("server", side.server_host), ("evaluator", side.evaluator_host)):
            if host is not None and not _host_known(r, rig_hosts, host):
                known = ", ".join(sorted(rig_hosts)) or "none"
                r.err(_child(snode, role, "host"), f"sides.{name}.{role}.host",
                      f"host {host!r} is not defined under hosts (defined: {known})")
        if side.tm_port is not None and side.tm_port in side.server_ports:
            r.err(_child(snode, "evaluator", "tm_port"), f"sides.{name}.evaluator.tm_port",
                  f"TM port {side.tm_port} collides with this side's server ports {list(side.server_ports)}")
    for name, side in sides.items():
        if side.debug_level >= 1 and side.debug_run:
            warnings.append(f"side {name} is a DEBUGGING run (--debug {side.debug_level}, evaluator.debug_run): "
                            "the route is drawn into the camera images; its scores are not the benchmark's")
        elif side.debug_level >= 1:
            warnings.append(f"side {name}: --debug {side.debug_level} in evaluator.args draws the route into the "
                            "camera images; launch refuses it unless evaluator.debug_run is true")
    names = list(sides)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            sa, sb = sides[a], sides[b]
            if sa.tm_port is not None and sa.tm_port == sb.tm_port:
                r.err(_child(nodes[b], "evaluator", "tm_port") or nodes[b], f"sides.{b}.evaluator.tm_port",
                      f"TM port {sb.tm_port} is also side {a}'s TM port: two TrafficManagers on one port "
                      "collide silently (the default 8000 is the usual trap); give each side its own")
            else:
                # Conservative on purpose: even on different hosts, one port plan per rig keeps the
                # operator's picture (and the winNAT scan) simple.
                shared = sorted(set(sa.planned_ports) & set(sb.planned_ports))
                if shared:
                    r.err(_child(nodes[b], "server", "rpc_port") or nodes[b], f"sides.{b}.server.rpc_port",
                          f"ports {shared} of side {b} (server N, N+1, N+2 and TM {list(sb.planned_ports)}) "
                          f"overlap side {a}'s {list(sa.planned_ports)}")
            if (sa.server_host is not None and sa.server_host == sb.server_host
                    and (sa.managed_by_evaluator or sb.managed_by_evaluator)):
                # What Bench2Drive 0.0.4 really does (design.md §4): its crash cleanup `ps -ef | grep
                # '-graphicsadapter=K' | ... kill -9` is a no-op (GNU grep reads -g as an option); its atexit
                # kills only its own server's process group. The cross-side killer is tools/clean_carla.sh.
                same_adapter = (f" (both on -graphicsadapter={sa.adapter})"
                                if sa.adapter is not None and sa.adapter == sb.adapter else "")
                warnings.append(f"sides {a} and {b} have servers on host {sa.server_host}{same_adapter} and an evaluator "
                                "manages its own server: Bench2Drive's crash cleanup (grep '-graphicsadapter=K' "
                                "| kill) is a no-op and its atexit kills only its own server group, but "
                                "tools/clean_carla.sh (`killall -9 -r CarlaUE4-Linux` and kills of every "
                                "leaderboard_evaluator) stops every side's server and evaluator on that host: "
                                "never run it on a shared host; stop a side with `carla-console recover`")
    return warnings


def _read_slurm(r: _Reader, node: yaml.Node, base: Path, hosts: dict[str, HostConfig]) -> SlurmConfig | None:
    """The `slurm:` block (engine: slurm). Names are checked here: a job name carries the rig's name."""
    n_issues = len(r.issues)
    m = r.mapping(node, "slurm", _SLURM_KEYS)
    if m is None:
        return None
    kw: dict[str, Any] = {}
    for k in ("host", "cluster", "python"):
        if k in m:
            kw[k] = r.scalar(m[k], f"slurm.{k}", str, conv=str)
    for k in ("partition", "gres", "time_limit"):   # null: not asked for (gres: null = no GPU request)
        if k in m:
            v_node = m[k]
            null = isinstance(v_node, yaml.ScalarNode) and _construct(v_node) is None
            kw[k] = None if null else r.scalar(v_node, f"slurm.{k}", str, conv=str)
    if "conf" in m:
        v = r.scalar(m["conf"], "slurm.conf", str)
        kw["conf"] = _expand(v, base) if v else None
    for k in ("requeue_budget", "array_throttle"):
        if k in m:
            kw[k] = r.scalar(m[k], f"slurm.{k}", int, check=lambda v: None if v >= 0 else "must be >= 0")
    if "sbatch_args" in m:
        kw["sbatch_args"] = r.seq(m["sbatch_args"], "slurm.sbatch_args", str) or ()
        owned = ("--wrap", "-J", "--job-name", "-o", "--output", "--array", "-a", "--parsable")
        for i, tok in enumerate(kw["sbatch_args"]):
            if tok.split("=")[0] in owned:
                r.err(m["sbatch_args"], f"slurm.sbatch_args[{i}]", f"{tok!r} is set by the console (the job's "
                      "name, output, array and script are its own); remove it")
    host = kw.get("host") or "local"
    if not ("host" in m and kw["host"] is None) and not _host_known(r, hosts, host):
        r.err(m.get("host") or node, "slurm.host", f"host {host!r} is not defined under hosts (the submit host "
              f"runs sbatch/squeue; defined: {', '.join(sorted(hosts)) or 'none'})")
    if len(r.issues) > n_issues:
        return None
    return SlurmConfig(**kw)


def _child(node: yaml.Node, *keys: str) -> yaml.Node | None:
    for k in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        for k_node, v_node in node.value:
            if getattr(k_node, "value", None) == k:
                node = v_node
                break
        else:
            return None
    return node


def load_config(path: str | os.PathLike) -> RigConfig:
    """Load and validate; raise ConfigError listing every issue found."""
    p = Path(path).expanduser()
    file = str(p)
    try:
        text = read_regular(p, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([ConfigIssue(file, None, "", "no such file (give one with -c FILE, or write "
                                       f"{default_config_path()})")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([ConfigIssue(file, None, "", f"cannot read: {e}")]) from None
    return parse_config(text, file)


# Deeper than any rig could need. A YAML nested thousands deep (by mistake or on purpose) exhausts the
# recursion of the composer: parse_config turns that RecursionError into a clean error at this depth's line.
MAX_DEPTH = 64


def _depth_problem(text: str, file: str) -> ConfigIssue | None:
    """The first place the flow or block nesting goes past MAX_DEPTH, found by the YAML scanner's events
    (iterative, no recursion). Run only after the composer gave up (RecursionError): a valid file pays
    nothing for it."""
    depth = 0
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line = ev.start_mark.line + 1 if ev.start_mark is not None else None
                    return ConfigIssue(file, line, "",
                                       f"nested more than {MAX_DEPTH} levels deep: not a rig config")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return None   # compose below reports it with its line
    return None


def parse_config(text: str, file: str = "<config>") -> RigConfig:
    try:
        return _parse_config(text, file)
    except RecursionError:
        # Only a hostile file gets here: find where it goes too deep (an iterative scan) for the message.
        issue = _depth_problem(text, file) or ConfigIssue(file, None, "", "nested too deep: not a rig config")
        raise ConfigError([issue]) from None


def _state_dir_problem(path: str) -> str | None:
    """A state_dir that exists as something else, or sits under a file, cannot hold the audit and states."""
    p = Path(path)
    try:
        if p.exists() and not p.is_dir():
            return f"{path} exists and is not a directory"
        for parent in p.parents:
            if parent.exists():
                return None if parent.is_dir() else f"{parent} is not a directory"
    except OSError as e:
        return f"{path}: {e}"
    return None


def _parse_config(text: str, file: str) -> RigConfig:
    r = _Reader(file)
    base = Path(file).expanduser().resolve().parent if not file.startswith("<") else Path.cwd()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError([ConfigIssue(file, line, "", f"not valid YAML: {getattr(e, 'problem', None) or e}")]) from None
    if root is None:
        raise ConfigError([ConfigIssue(file, None, "", "the file is empty")])
    top = r.mapping(root, "", _TOP_KEYS)
    if top is None:
        raise ConfigError(r.issues)
    if "version" in top:
        r.scalar(top["version"], "version", int, check=lambda v: None if v == 1 else f"only version 1 is known, got {v}")
    name = r.scalar(top["name"], "name", str, conv=str) if "name" in top else Path(file).stem
    state_dir = r.scalar(top["state_dir"], "state_dir", str) if "state_dir" in top else \
        "~/.local/state/carla-console"
    if state_dir:
        problem = _state_dir_problem(_expand(state_dir, base))
        if problem:
            r.err(top.get("state_dir") or root, "state_dir", problem)
    conda = _argv(r, top["conda"], "conda") if "conda" in top else ("conda",)
    poll_s = r.scalar(top["poll_s"], "poll_s", float, check=_within("poll_s")) if "poll_s" in top else 1.0
    resources = _read_resources(r, top["resources"]) if "resources" in top else ResourcesConfig()
    notify: tuple[str, ...] = ()
    if "notify" in top:
        urls = r.seq(top["notify"], "notify", str, check=lambda v: None if "://" in v else
                     f"not an apprise URL (scheme://...): {v!r}")
        notify = tuple(urls or ())
    rig_hosts: dict[str, HostConfig] = {}
    if "hosts" in top:
        for hname, _k, hnode in r.names(top["hosts"], "hosts"):
            h = _read_host(r, hname, hnode, base)
            if h is not None:
                rig_hosts[hname] = h
    sides: dict[str, SideConfig] = {}
    side_facts: dict[str, _SideFacts] = {}
    side_nodes: dict[str, yaml.Node] = {}
    if "sides" in top:
        entries = r.names(top["sides"], "sides")
        if not entries and isinstance(top["sides"], yaml.MappingNode):
            r.err(top["sides"], "sides", "a rig needs at least one side")
        for sname, _k, snode in entries:
            side_nodes[sname] = snode
            s = _read_side(r, sname, snode, base, side_facts)
            if s is not None:
                sides[sname] = s
    engine = r.scalar(top["engine"], "engine", str, check=lambda v: None if v in ENGINES else
                      f"must be one of {', '.join(ENGINES)}, got {v!r}") if "engine" in top else "process"
    slurm = _read_slurm(r, top["slurm"], base, rig_hosts) if "slurm" in top else None
    if engine == "slurm" and "slurm" not in top:
        r.err(root, "slurm", "engine slurm needs a `slurm:` block (at least `slurm: {}`)")
    if engine == "slurm" and name and not all(c.isalnum() or c in "-_" for c in str(name)):
        r.err(top.get("name") or root, "name", "a SLURM rig's name goes into its job names: letters, digits, "
              "'-' and '_' only")
    # Cross-checks run on whatever parsed, so one pass reports a bad port and a missing host together.
    warnings = _cross_checks(r, rig_hosts, side_facts, side_nodes)
    if r.issues:
        raise ConfigError(r.issues)
    return RigConfig(path=str(Path(file).expanduser().resolve()) if not file.startswith("<") else file,
                     name=name or "rig", state_dir=_expand(state_dir or "~/.local/state/carla-console", base),
                     conda=conda or ("conda",), poll_s=poll_s or 1.0, hosts=rig_hosts, sides=sides,
                     warnings=tuple(warnings), engine=engine or "process",
                     slurm=(slurm or SlurmConfig()) if engine == "slurm" else slurm,
                     resources=resources or ResourcesConfig(), notify=notify)
