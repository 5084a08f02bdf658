"""Typed, frozen values of a rig's configuration (loaded and validated by ops/config.py)."""
from __future__ import annotations

import functools
import posixpath
from dataclasses import dataclass, field
from typing import Literal

HostType = Literal["local", "ssh", "wsl-interop"]
HostOs = Literal["linux", "windows"]
VramSource = Literal["nvml", "nvidia-smi", "auto"]


@dataclass(frozen=True)
class HostConfig:
    name: str
    type: HostType
    os: HostOs = "linux"
    address: str | None = None     # ssh: hostname/IP, or '@gateway' (default route, resolved at start)
    port: int = 22
    user: str | None = None
    known_hosts: str | None = None  # ssh: path; host keys are verified against it, never auto-accepted
    client_keys: tuple[str, ...] = ()
    connect_timeout_s: float = 10.0
    powershell: str = "powershell.exe"  # wsl-interop
    # Tool overrides (argv prefix). The sim rig points these at its fakes.
    nvidia_smi: tuple[str, ...] = ("nvidia-smi",)
    netsh: tuple[str, ...] = ("netsh",)
    vram_source: VramSource = "auto"   # auto: nvml on local hosts, nvidia-smi elsewhere
    memory_floor_mb: int | None = None   # free host memory below this warns (None: resources.memory_floor_mb)
    console_python: str | None = None    # ssh: the interpreter with carla-console there (None: the console's own path)


@dataclass(frozen=True)
class ServerConfig:
    host: str
    command: tuple[str, ...]
    rpc_port: int
    adapter: int | None = None     # last known good adapter; None until polling found one
    adapter_candidates: tuple[int, ...] = (0, 2, 1, 3)
    vram_min_delta_mb: int = 4096
    start_wait_s: float = 30.0
    probe_timeout_s: float = 5.0
    managed_by_evaluator: bool = False  # the evaluator starts/kills its own server (Bench2Drive style)
    auto_start: bool = False       # launch/harness run adapter polling when this server is DEAD
    hung_probes: int = 3           # HUNG: this many consecutive unanswered rpc probes (K) ...
    hung_after_s: float = 60.0     # ... spanning at least this long (T)

    @property
    def ports(self) -> tuple[int, int, int]:
        return (self.rpc_port, self.rpc_port + 1, self.rpc_port + 2)


@dataclass(frozen=True)
class EvaluatorConfig:
    host: str
    conda_env: str
    cwd: str                       # absolute, ~ expanded
    script: str                    # relative to cwd unless absolute
    routes: str                    # relative to cwd unless absolute
    checkpoint: str                # relative to cwd unless absolute
    log: str                       # relative to cwd unless absolute
    tm_port: int = 8000
    args: tuple[tuple[str, str], ...] = ()   # extra evaluator args, '--key value', in config order
    env: tuple[tuple[str, str], ...] = ()
    max_attempts: int = 3
    python: str = "python"
    # --debug >= 1 draws the route into camera images: refused unless the operator says this run is for
    # debugging (then it is labelled a debugging run everywhere, never a score).
    debug_run: bool = False
    share_server_gpu: bool = False   # the model may run on the GPU its server renders on

    def path(self, rel: str) -> str:
        """A path of this evaluator resolved against its cwd (POSIX: evaluators run on Linux/WSL)."""
        return _resolved(self.cwd, rel)


@functools.lru_cache(maxsize=4096)
def _resolved(cwd: str, rel: str) -> str:
    # Asked for every side's log and checkpoint on every beat: a rig's few paths are resolved once.
    return rel if posixpath.isabs(rel) else posixpath.normpath(posixpath.join(cwd, rel))


@dataclass(frozen=True)
class HeartbeatConfig:
    stall_s: float = 1500.0


@dataclass(frozen=True)
class SupervisorConfig:
    """What the detached harness may do by itself (README: "The supervisor"). `auto` is the rig's documented
    confirmation policy for automatic recoveries and server restarts; it never overrides UNKNOWN."""

    auto: bool = True                   # act on STALE / DEAD / HUNG without a human (off: watch and notify)
    watch_s: float = 5.0                # how often the supervisor looks at heartbeat, evaluator and server
    max_recoveries: int = 10            # automatic recoveries of a stalled evaluator, per side
    max_route_recoveries: int = 3       # ... per route
    server_restarts_per_hour: int = 3   # server restarts (DEAD or HUNG) in any sliding hour
    quarantine_after: int = 3           # failures of one route (crash, hang, set-up) before it is retired; 0: never
    unknown_wait_s: float = 600.0       # how long an UNKNOWN server may block the next attempt before giving up
    bell: bool = True                   # the TUI rings the terminal bell when this side needs a human


def debug_level(args: tuple[tuple[str, str], ...]) -> int:
    """The evaluator's --debug among its extra args (0 when absent or not a number)."""
    for key, value in args:
        if key == "debug":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


@dataclass(frozen=True)
class SideConfig:
    name: str
    server: ServerConfig
    evaluator: EvaluatorConfig
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    expect_wall_game_min: float | None = None   # fake-success floor of this side's model; None: no alarm
    vram_budget_mb: int | None = None   # server + model on its GPU; launch refuses when it does not fit

    @property
    def debug_level(self) -> int:
        """The evaluator's --debug from the config's args (0 when absent or not a number)."""
        return debug_level(self.evaluator.args)
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)

    @property
    def planned_ports(self) -> tuple[int, int, int, int]:
        return (*self.server.ports, self.evaluator.tm_port)


@dataclass(frozen=True)
class SlurmConfig:
    """`slurm:` — the cluster a rig with `engine: slurm` runs its sides on (ops/engines/slurm.py)."""
    host: str = "local"            # where sbatch/squeue/scontrol/scancel run (a host of the rig)
    cluster: str = "slurm"         # the name targets and audit lines carry
    conf: str | None = None        # SLURM_CONF for those clients (None: the environment's)
    partition: str | None = None
    gres: str | None = "gpu:1"     # per side; the job's GPU comes from this allocation
    time_limit: str | None = None  # sbatch -t
    requeue_budget: int = 3        # requeues of a lost job (node failure, time limit, killed from outside)
    array_throttle: int = 0        # several sides submitted at once: one array, %k running at a time (0: no limit)
    sbatch_args: tuple[str, ...] = ()
    python: str = ""               # the interpreter the job runs the console with ("": this one)


@dataclass(frozen=True)
class ResourcesConfig:
    disk_warning_mb: int = 20480    # free space on a checkpoint/log/state filesystem below this warns
    disk_critical_mb: int = 2048    # below this no new attempt starts (a rewritten checkpoint would truncate)
    memory_floor_mb: int | None = None   # per host; None: 6144 on Windows hosts, 2048 elsewhere
    preflight_timeout_s: float = 60.0    # conda start + imports of carla, the agent and torch

    def memory_floor(self, host: HostConfig) -> int:
        if host.memory_floor_mb is not None:
            return host.memory_floor_mb
        if self.memory_floor_mb is not None:
            return self.memory_floor_mb
        return 6144 if host.os == "windows" else 2048


@dataclass(frozen=True)
class RigConfig:
    path: str                      # the file it came from
    name: str
    state_dir: str                 # absolute
    conda: tuple[str, ...]         # the conda executable (argv prefix)
    poll_s: float
    hosts: dict[str, HostConfig]
    sides: dict[str, SideConfig]
    warnings: tuple[str, ...] = ()
    engine: str = "process"        # 'process' (detached local harness) | 'slurm' (batch jobs)
    slurm: SlurmConfig | None = None
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    notify: tuple[str, ...] = ()   # apprise URLs (ops/notify.py); empty: no notifications

    def side(self, name: str) -> SideConfig:
        return self.sides[name]
