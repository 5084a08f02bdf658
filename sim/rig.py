"""The simulated rig's lifecycle: up (files + servers [+ evaluators]), down, inject.

`carla-console sim up/down/inject` and `--demo` call these; the tests call them directly.

    up(D)                  -> D/rig.yaml      fresh files, free ports, servers answering `version`
    start(D).wait()        -> (the same)      the config at once, the servers' answers later (the demo)
    start_evaluator(D, S)  -> ProcRecord      a side's evaluator under the fake conda (detached)
    launch_server(D, N, K) -> Popen           one more server (launcher + shipping), recorded
    inject(D, S, FAULT)    -> Injection       hang | crash | finish | server-crash | server-hang
    down(D)                -> StopReport      everything recorded, whole trees, TERM then KILL

Everything started is recorded by (pid, create_time) in D/sim/pids.json, and every long-lived fake
registers itself in D/sim/registry.jsonl, so `down` also stops what the console started through the
fakes (its servers, its conda-wrapped evaluators) — and nothing else.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from sim import envs as sim_envs
from sim import install, rpc
from sim import ports as ports_mod
from sim.layout import SimLayout, read_json, write_json_atomic, write_text_atomic
from sim.ledger import live_entries
from sim.procs import (
    ProcRecord,
    StopReport,
    all_records,
    find_by_token,
    identify,
    record_started,
    stop_family,
    wait_gone,
    wait_until,
)

EVALUATOR_FAULTS = ("hang", "crash", "finish", "agent-setup")
SERVER_FAULTS = ("server-crash", "server-hang")
FAULTS = EVALUATOR_FAULTS + SERVER_FAULTS
SERVER_FLAGS = ("-RenderOffScreen", "-nosound")
ROUTES_FILE = "routes.xml"
CHECKPOINT_FILE = "results/result.json"
LOG_FILE = "logs/eval.log"
SERVER_READY_S = 10.0
ROUTE_S = 3.0          # seconds a sim route takes, unless up()/start() are told otherwise
_SIDE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class SideState:
    """What up() decided for one side (D/sim/sides.json)."""
    name: str
    rpc_port: int
    tm_port: int
    adapter: int
    work: str
    route_s: float
    tick_s: float
    eval_timeout_s: float
    server_mode: str = "external"   # 'external' (the sim starts it) | 'evaluator' (the evaluator does)
    host: str = "local"             # the rig's host its server and evaluator run on (sim/hosts.py for remote ones)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Injection:
    side: str
    fault: str
    detail: str
    pids: tuple[int, ...] = ()


# ------------------------------------------------------------------------------------------------ state

def _load_sides(layout: SimLayout) -> dict[str, SideState]:
    raw = read_json(layout.sides_json, None)
    if raw is None:
        raise ValueError(f"{layout.root} is not a sim rig (no {layout.sides_json}); run `sim up` first")
    return {name: SideState(**d) for name, d in raw["sides"].items()}


def _side(layout: SimLayout, side: str) -> SideState:
    sides = _load_sides(layout)
    if side not in sides:
        raise ValueError(f"unknown side {side!r}: this sim rig has {', '.join(sorted(sides)) or 'no sides'}")
    return sides[side]


def side_env(layout: SimLayout, st: SideState) -> dict[str, str]:
    """The evaluator env the sim needs (also written into rig.yaml for the console's launches).
    B2D_EXTERNAL_SERVER=1: the field notes' patched evaluator, which uses the server the sim started.
    server_mode 'evaluator': the unpatched one, which starts its own ($CARLA_ROOT/CarlaUE4.sh)."""
    mode = ({"B2D_EXTERNAL_SERVER": "1"} if st.server_mode == "external" else
            {"CARLA_ROOT": str(layout.bin), "SIM_SERVER_WAIT_S": "30", "SIM_CONNECT_RETRY_S": "0.5"})
    return {**mode,
            "CARLA_SIM_FAULTS": str(layout.fault_file(st.name)), "SIM_ROUTE_S": f"{st.route_s:g}",
            "SIM_TICK_S": f"{st.tick_s:g}", "CARLA_SIM_SIDE": st.name,
            # Bench2Drive's run_evaluation.sh exports its two trees the same way.
            "PYTHONPATH": os.pathsep.join(sim_envs.tree_paths(Path(st.work)))}


def running(dir: str | Path) -> list[ProcRecord]:
    """The recorded processes of this rig that are still alive."""
    layout = SimLayout.of(dir)
    return [r for r in all_records(layout) if identify(r) is not None]


# ---------------------------------------------------------------------------------------------- servers

def server_argv(layout: SimLayout, rpc_port: int, adapter: int) -> list[str]:
    """What sim up runs; the console appends the same two tokens to its configured command."""
    return [str(layout.launcher), *SERVER_FLAGS, f"-carla-rpc-port={rpc_port}", f"-graphicsadapter={adapter}"]


def launch_server(dir: str | Path, rpc_port: int, adapter: int, *, side: str | None = None,
                  log: Path | None = None, nice: int = 0, host: str = "local") -> subprocess.Popen:
    """Start one launcher (-> shipping server) detached, in its own session; record the launcher.

    Returns at once: the shipping child registers itself when it starts. Use wait_server() to wait.
    nice: a lower CPU priority for the pair (the shipping child, forked after the launcher's imports,
    inherits it). host: a remote sim host (sim/hosts.py): the server runs in its namespace.
    """
    layout = SimLayout.of(dir)
    log = log or (layout.server_log(side) if side else layout.logs / f"server_{rpc_port}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    argv, env = server_argv(layout, rpc_port, adapter), None
    if host != "local":
        from sim.hosts import hosts
        where = hosts(layout)[host]
        argv, env = where.argv(*argv), {**os.environ, **where.env}
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, env=env,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=layout.bin)
    if nice:
        with contextlib.suppress(OSError):   # gone already: wait_server will say so
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
    try:
        record_started(layout, [ProcRecord.of(psutil.Process(proc.pid), "launcher", side)])
    except psutil.NoSuchProcess:
        pass  # it died already; nothing to stop later
    return proc


def shipping_processes(dir: str | Path, rpc_port: int) -> list[psutil.Process]:
    """The shipping server(s) on rpc_port: exact `-carla-rpc-port=N` token and exact shipping argv[0]."""
    layout = SimLayout.of(dir)
    return find_by_token(f"-carla-rpc-port={rpc_port}", argv0=str(layout.shipping))


def wait_server(dir: str | Path, launcher: subprocess.Popen, rpc_port: int,
                timeout_s: float = SERVER_READY_S, *, side: str | None = None,
                address: str = "127.0.0.1") -> psutil.Process:
    """Wait until the server answers `version`; return its shipping process (recorded in pids.json)."""
    layout = SimLayout.of(dir)

    def died() -> str | None:
        rc = launcher.poll()
        return f"server launcher exited with {rc} before answering (see {layout.logs})" if rc is not None else None

    rpc.wait_version(address, rpc_port, timeout_s, stop_if=died)
    found = [p for p in shipping_processes(dir, rpc_port) if _is_descendant(p, launcher.pid)]
    if not found:
        raise RuntimeError(f"server on {rpc_port} answers but no shipping child of launcher {launcher.pid}")
    proc = found[0]
    record_started(layout, [ProcRecord.of(proc, "server", side)])
    return proc


def _is_descendant(proc: psutil.Process, ancestor: int) -> bool:
    try:
        return any(p.pid == ancestor for p in proc.parents())
    except psutil.NoSuchProcess:
        return False


# -------------------------------------------------------------------------------------------- evaluator

def evaluator_argv(layout: SimLayout, st: SideState, *, resume: bool = False) -> list[str]:
    work = Path(st.work)
    argv = [str(layout.conda), "run", "-n", install.ENV_CARLA, "--no-capture-output", "--cwd", str(work),
            "python", install.EVALUATOR_SCRIPT, "--port", str(st.rpc_port),
            "--traffic-manager-port", str(st.tm_port), "--routes", str(work / ROUTES_FILE),
            "--checkpoint", str(work / CHECKPOINT_FILE), "--agent", "agent.py", "--agent-config", "ckpt/",
            "--timeout", f"{st.eval_timeout_s:g}"]
    if resume:
        argv += ["--resume", "True"]   # never "False": type=bool makes any non-empty string True
    return argv


def start_evaluator(dir: str | Path, side: str, *, resume: bool = False,
                    env: Mapping[str, str] | None = None) -> ProcRecord:
    """Start a side's evaluator detached under the fake conda; stdout+stderr appended to its log.

    Stand-in for the console's harness. Returns the conda wrapper's record (the evaluator is its child
    and registers itself).
    """
    layout = SimLayout.of(dir)
    st = _side(layout, side)
    work = Path(st.work)
    log = work / LOG_FILE
    log.parent.mkdir(parents=True, exist_ok=True)
    # Unbuffered, as the console's pinned execution runs it: the log's mtime is the heartbeat.
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **side_env(layout, st), **(env or {})}
    with open(log, "ab") as fh:   # an open file, no pipe: nothing buffers between it and the log
        argv = evaluator_argv(layout, st, resume=resume)
        if st.host != "local":   # on its remote sim host: inside that host's namespace
            from sim.hosts import hosts
            argv = hosts(layout)[st.host].argv(*argv)
        proc = subprocess.Popen(argv, cwd=work, env=environ,
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    rec = ProcRecord.of(psutil.Process(proc.pid), "conda", side)
    record_started(layout, [rec])
    _CHILDREN.append(proc)
    return rec


# Detached processes this process started. They stay our children: once exited they are zombies
# until reaped — by down(), by reap_children(), or when this process exits. Not reaped behind the
# caller's back, so that a caller may still psutil.wait() one for its exit code.
_CHILDREN: list[subprocess.Popen] = []


def reap_children() -> list[int]:
    """Reap the exited processes rig started from this process (for long-lived callers: the demo)."""
    done = [p for p in _CHILDREN if p.poll() is not None]
    for p in done:
        _CHILDREN.remove(p)
    return [p.pid for p in done]


# ---------------------------------------------------------------------------------------------- rig.yaml

def rig_config(layout: SimLayout, sides: Sequence[SideState], stall_s: float,
               remote: dict[str, dict] | None = None) -> dict[str, Any]:
    """remote: the `hosts:` entries of the ssh hosts (sim/hosts.py) the sides run on (SideState.host)."""
    cfg: dict[str, Any] = {
        "version": 1,
        "name": f"sim-{layout.root.name}",
        "state_dir": str(layout.state),
        "conda": [str(layout.conda)],
        "poll_s": 1.0,
        "hosts": {"local": {"type": "local", "os": "linux", "nvidia_smi": [str(layout.nvidia_smi)],
                            "netsh": [str(layout.netsh)], "vram_source": "nvidia-smi"}},
        "sides": {},
    }
    if remote:
        cfg["hosts"] = dict(remote)
    for st in sides:
        where = st.host
        cfg["sides"][st.name] = {
            "server": {"host": where, "command": [str(layout.launcher), *SERVER_FLAGS],
                       "rpc_port": st.rpc_port, "adapter": st.adapter, "adapter_candidates": [0, 2, 1, 3],
                       "vram_min_delta_mb": 4096, "start_wait_s": 3, "probe_timeout_s": 3,
                       **({"managed_by_evaluator": True} if st.server_mode == "evaluator" else {})},
            "evaluator": {"host": where, "conda_env": install.ENV_CARLA, "cwd": st.work,
                          "script": install.EVALUATOR_SCRIPT, "routes": ROUTES_FILE,
                          "checkpoint": CHECKPOINT_FILE, "log": LOG_FILE, "tm_port": st.tm_port,
                          "args": {"agent": "agent.py", "agent-config": "ckpt/",
                                   "timeout": int(st.eval_timeout_s) if float(st.eval_timeout_s).is_integer()
                                   else st.eval_timeout_s},
                          "env": side_env(layout, st), "max_attempts": 3},
            "heartbeat": {"stall_s": int(stall_s) if float(stall_s).is_integer() else stall_s},
        }
    return cfg


# ------------------------------------------------------------------------------------------------ up/down

def up(dir: str | Path, *, sides: Sequence[str] = ("A", "B"), start_evaluators: bool = True,
       route_s: float = ROUTE_S, routes: int = 10, stall_s: float = 6.0,
       excluded: Sequence[Sequence] | None = None, gpus: dict[str, Any] | None = None,
       tick_s: float = 0.5, eval_timeout_s: float = 600.0, adapter: int = 0,
       server_mode: str = "external", remote: bool = False, hosts: int = 1, netns: bool | None = None) -> Path:
    """Create the rig under dir, start its servers (and evaluators); return the rig.yaml path.

    server_mode 'evaluator': no server is started; each side's evaluator is the unpatched Bench2Drive one
    that starts its own (rig.yaml: server.managed_by_evaluator true, env CARLA_ROOT, no B2D_EXTERNAL_SERVER).

    remote: the sides' servers and evaluators are on ssh hosts (`remote`, or `remote1`..`remoteN` for
    hosts=N, sides dealt round robin), each a network namespace with a real sshd of its own where root
    allows, else an sshd on 127.0.0.1 (sim/hosts.py; own host key and known_hosts). Same machine and
    filesystem, so the sim's servers (started in the host's namespace) and files are that host's.
    netns: True/False forces namespaces / 127.0.0.1 (None: namespaces where root allows).

    Refuses (RuntimeError) when processes of an earlier `up` in dir are still alive: `down` first.
    On any failure, whatever it started is stopped again before the error propagates.
    """
    layout, excluded_ranges = _fresh(dir, sides, gpus, excluded)
    try:
        if server_mode not in ("external", "evaluator"):
            raise ValueError(f"server_mode {server_mode!r}: expected 'external' or 'evaluator'")
        remote_hosts = {}
        placed: dict[str, str] = {}
        if remote:
            from sim import hosts as sim_hosts
            names = ["remote"] if hosts <= 1 else [f"remote{i + 1}" for i in range(hosts)]
            remote_hosts = sim_hosts.start(layout, names, use_netns=netns)
            placed = {s: names[i % len(names)] for i, s in enumerate(sides)}
        states, launchers = _launch_sides(layout, sides, excluded_ranges, route_s, routes, tick_s,
                                          eval_timeout_s, adapter, launch=server_mode == "external", placed=placed)
        states = [SideState(**{**st.to_json(), "server_mode": server_mode}) for st in states]
        for i, st in enumerate(states):
            if st.name not in launchers:
                continue
            for attempt in range(3):
                try:
                    wait_server(layout.root, launchers[st.name], st.rpc_port, side=st.name,
                                address=remote_hosts[st.host].address if st.host in remote_hosts else "127.0.0.1")
                    break
                except (RuntimeError, TimeoutError):
                    # Lost a port race (or a slow start): new ports for this side, try again.
                    if attempt == 2:
                        raise
                    _stop_popen(launchers[st.name])
                    taken = [q for other in states if other is not st for q in
                             (other.rpc_port, other.rpc_port + 1, other.rpc_port + 2, other.tm_port)]
                    p = ports_mod.pick(1, excluded=excluded_ranges, avoid=taken)[0]
                    st = SideState(**{**st.to_json(), "rpc_port": p.rpc, "tm_port": p.tm})
                    states[i] = st
                    launchers[st.name] = launch_server(layout.root, p.rpc, adapter, side=st.name, host=st.host)
                    _CHILDREN.append(launchers[st.name])
        _write_config(layout, states, stall_s, {n: h.config for n, h in remote_hosts.items()})
        if start_evaluators:
            for st in states:
                start_evaluator(layout.root, st.name)
    except BaseException:
        down(layout.root)
        raise
    return layout.rig_yaml


@dataclass(frozen=True)
class Startup:
    """A rig whose config is written and whose servers are starting (`start`); `wait` until they answer."""
    root: Path
    rig_yaml: Path
    launchers: Mapping[str, tuple[subprocess.Popen, int]]   # side -> (launcher, rpc port)

    def wait(self, timeout_s: float = SERVER_READY_S) -> None:
        """Block until every side's server answers `version` and record its shipping process. No port
        retry, unlike up(): the config is already out, so a lost port race is an error, as it would be
        on a real rig."""
        for side, (launcher, port) in self.launchers.items():
            wait_server(self.root, launcher, port, timeout_s, side=side)


def start(dir: str | Path, *, sides: Sequence[str] = ("A", "B"), route_s: float = ROUTE_S, routes: int = 10,
          stall_s: float = 6.0, tick_s: float = 0.5, eval_timeout_s: float = 600.0,
          adapter: int = 0, nice: int = 0) -> Startup:
    """up() without the waiting: write the rig and launch its servers, return at once.

    For the demo, whose first frame need not wait for the servers: the operator sees them come up, as
    on a real rig. Evaluators are not started (they need answering servers). Same refusals as up().
    nice: the servers' CPU priority, so that starting them does not slow the console that shows them.
    """
    layout, excluded_ranges = _fresh(dir, sides, None, None)
    try:
        states, launchers = _launch_sides(layout, sides, excluded_ranges, route_s, routes, tick_s,
                                          eval_timeout_s, adapter, nice)
        _write_config(layout, states, stall_s)
    except BaseException:
        down(layout.root)
        raise
    return Startup(layout.root, layout.rig_yaml, {st.name: (launchers[st.name], st.rpc_port) for st in states})


def _fresh(dir: str | Path, sides: Sequence[str], gpus: dict[str, Any] | None,
           excluded: Sequence[Sequence] | None) -> tuple[SimLayout, list]:
    """Validate the side names, refuse a running rig, clear an old one's state, write the tools and
    the sim's config. Returns the layout and the exclusion ranges the ports must avoid."""
    layout = SimLayout.of(dir)
    names = list(sides)
    if not names or len(set(names)) != len(names) or not all(_SIDE_NAME.match(s) for s in names):
        raise ValueError(f"side names must be distinct words ([A-Za-z0-9_-]): {names!r}")
    if running(layout.root):
        raise RuntimeError(f"a sim rig is already running in {layout.root}: run `sim down` first")
    from sim import hosts as sim_hosts
    sim_hosts.teardown(SimLayout.of(dir))   # an earlier --remote rig that was never taken down
    layout.root.mkdir(parents=True, exist_ok=True)

    # A fresh start: old records, ledger entries, modes and faults belong to a rig that is gone.
    for stale in (layout.pids_json, layout.registry, layout.sides_json, layout.nvsmi_mode, layout.netsh_mode,
                  layout.conda_mode):
        stale.unlink(missing_ok=True)
    for folder in (layout.gpu_ledger, layout.server_modes, layout.faults):
        if folder.is_dir():
            for f in folder.iterdir():
                if f.is_file():
                    f.unlink()
    install.write_tools(layout)
    install.write_sim_config(layout, gpus=gpus, excluded=excluded)
    return layout, read_json(layout.excluded_json, [])


def _launch_sides(layout: SimLayout, sides: Sequence[str], excluded_ranges: list, route_s: float, routes: int,
                  tick_s: float, eval_timeout_s: float, adapter: int,
                  nice: int = 0, launch: bool = True,
                  placed: dict[str, str] | None = None) -> tuple[list[SideState], dict[str, subprocess.Popen]]:
    """Free ports, a work dir and a launched (not yet answering) server for each side."""
    states: list[SideState] = []
    launchers: dict[str, subprocess.Popen] = {}
    for name, p in zip(sides, ports_mod.pick(len(sides), excluded=excluded_ranges)):
        work = install.write_work_dir(layout, name, routes)
        states.append(SideState(name=name, rpc_port=p.rpc, tm_port=p.tm, adapter=adapter, work=str(work),
                                route_s=route_s, tick_s=tick_s, eval_timeout_s=eval_timeout_s,
                                host=(placed or {}).get(name, "local")))
        if launch:
            launchers[name] = launch_server(layout.root, p.rpc, adapter, side=name, nice=nice, host=states[-1].host)
            _CHILDREN.append(launchers[name])
    return states, launchers


def _write_config(layout: SimLayout, states: Sequence[SideState], stall_s: float,
                  remote: dict[str, dict] | None = None) -> None:
    write_json_atomic(layout.sides_json, {"sides": {st.name: st.to_json() for st in states}})
    write_text_atomic(layout.rig_yaml, yaml.safe_dump(rig_config(layout, states, stall_s, remote), sort_keys=False))


def _stop_popen(proc: subprocess.Popen) -> None:
    try:
        stop_family([psutil.Process(proc.pid)], grace_s=1.0)
    except psutil.NoSuchProcess:
        pass
    proc.poll()


def down(dir: str | Path, grace_s: float = 3.0) -> StopReport:
    """Stop every recorded process of this rig (and their descendants): TERM, grace, KILL. Idempotent."""
    layout = SimLayout.of(dir)
    # Harnesses the console launched into this rig go first: a harness that outlived its evaluator would
    # start the next attempt against a server that is about to stop.
    harnesses = [p for p in (identify(r) for r in _harness_records(layout)) if p is not None]
    first = stop_family(harnesses, grace_s=grace_s) if harnesses else StopReport()
    procs = [p for p in (identify(r) for r in all_records(layout)) if p is not None]
    report = stop_family(procs, grace_s=grace_s) if procs else StopReport()
    report = StopReport(first.terminated + report.terminated, first.killed + report.killed,
                        first.survivors + report.survivors)
    reap_children()
    live_entries(layout, clean=True)   # drop the ledger entries of the servers just stopped
    from sim import hosts as sim_hosts
    sim_hosts.teardown(layout)         # the remote hosts' namespaces, now empty
    return report


def _harness_records(layout: SimLayout) -> list[ProcRecord]:
    """The harnesses of this rig, from the console's own state files (pid + create time)."""
    out = []
    for path in sorted((layout.state / "sides").glob("*/harness.json")):
        try:
            data = json.loads(path.read_text())
            out.append(ProcRecord(pid=int(data["pid"]), create_time=float(data["create_time"]), role="harness",
                                  side=str(data.get("side"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue   # no readable record: nothing of ours to stop by it
    return out


# ---------------------------------------------------------------------------------------------- inject

def inject(dir: str | Path, side: str, fault: str) -> Injection:
    """Make something go wrong on a side.

    hang | crash | finish: written to the side's evaluator fault file (the evaluator reads it within a
    tick and deletes it). server-crash: SIGKILL the side's shipping server, found by its exact
    `-carla-rpc-port=N` token and shipping argv[0] (the launcher then exits 137). server-hang: the
    server keeps its sockets but stops answering (D/sim/servers/<N>.mode).
    """
    layout = SimLayout.of(dir)
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
    st = _side(layout, side)
    if fault in EVALUATOR_FAULTS:
        path = layout.fault_file(side)
        write_text_atomic(path, fault + "\n")
        return Injection(side, fault, f"wrote {fault!r} to {path}")
    if fault == "server-hang":
        path = layout.server_mode(st.rpc_port)
        # The hang belongs to the running shipping process: a server restarted on the port answers again.
        running = shipping_processes(layout.root, st.rpc_port)
        word = f"hang {running[-1].pid}" if running else "hang"
        write_text_atomic(path, word + "\n")
        return Injection(side, fault, f"wrote {word!r} to {path}", tuple(p.pid for p in running))
    targets = shipping_processes(layout.root, st.rpc_port)
    if not targets:
        raise RuntimeError(f"side {side}: no server process with -carla-rpc-port={st.rpc_port} to crash")
    for proc in targets:
        try:
            proc.kill()   # psutil re-checks the identity (create time) before the signal
        except psutil.NoSuchProcess:
            pass
    wait_gone(targets, 3.0)
    return Injection(side, fault, f"SIGKILL to the server on port {st.rpc_port}",
                     tuple(p.pid for p in targets))


def wait_for(predicate, timeout_s: float) -> bool:
    """Re-export for callers of the sim (tests, demo): poll predicate until true or timeout."""
    return wait_until(predicate, timeout_s)
