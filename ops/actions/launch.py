"""Launching a side: the evaluator's exact argv, the checks that refuse a launch, and the detached harness.

`plan_launch` only reads (the dry-run shows exactly what a launch would do and refuses the same way);
`execute_launch` goes through the guard (Op.RELAUNCH), backs the checkpoint up and starts
`carla-console -c RIG harness SIDE` in its own session, so the run survives the console and its SSH
session. A side on a remote (ssh) evaluator host: the same, started on that host with `--as-host NAME`, its
files read through the host (ops/actions/remote.py). The harness (ops/actions/harness.py) calls `plan_launch` again before every attempt: the rule is applied
where the evaluator is actually started, not just once at the console.

Refusals (exit 3): this side's evaluator or harness already running (a second one would fight for the
server: the incident of the outer bash loop), server not ALIVE, port conflicts, conda env missing,
checkpoint total mismatch (Bench2Drive would empty it), anything UNKNOWN.
"""
from __future__ import annotations

import asyncio
import json
import os
import posixpath
import stat
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ops.actions import remote
from ops.actions import resume as rr
from ops.actions.audit import Audit
from ops.actions.gate import launch_gate
from ops.actions.guard import Confirmation, Guard, Op, Outcome, Plan, make_plan
from ops.actions.runplan import RunPlan, plan_runs
from ops.actions.side_lock import SideBusy, side_lock
from ops.model import RigConfig, SideConfig
from ops.parse.checkpoint import parse_checkpoint
from ops.parse.errors import ParseError
from ops.parse.routes import parse_routes
from ops.platform import atomic
from ops.platform.pinned import python_argv
from ops.platform.procs import ProcTable
from ops.probes.harness_state import HarnessState, read_state, side_dir
from ops.probes.ports import scan_ports
from ops.probes.prober import SideSnapshot
from ops.probes.server import server_address
from ops.rig import LiveRig
from ops.tristate import State

CONDA_LIST_TIMEOUT_S = 60.0   # a cold `conda env list` on a big install takes seconds
HARNESS_START_WAIT_S = 30.0
LOCK_EXTRA_S = 60.0           # a launch waits for another one's whole launch (plan + harness start) and this   # the harness probes the server (carla client in the pinned env) first


@dataclass(frozen=True)
class Check:
    """One precondition of a launch, with what was measured."""

    name: str
    status: str            # ok | refused | unknown
    detail: str

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def evaluator_args(side: SideConfig, resume: bool, *, routes: str | None = None,
                   checkpoint: str | None = None, host: str | None = None) -> list[str]:
    """The evaluator's own arguments: the ports and files the console owns, then the config's args.
    routes / checkpoint: a subset run's own files (ops/actions/runplan.py) instead of the side's.
    host: the server's address as the evaluator's host reaches it (probes/server.server_address)."""
    ev = side.evaluator
    args = ["--host", host] if host else []
    args += ["--port", str(side.server.rpc_port), "--traffic-manager-port", str(ev.tm_port),
            "--checkpoint", checkpoint or ev.path(ev.checkpoint), "--routes", routes or ev.path(ev.routes)]
    if resume:
        args += list(rr.RESUME_FLAG)   # never "--resume False": type=bool makes that True
    if side.server.managed_by_evaluator:
        args += ["--gpu-rank", str(gpu_rank(side))]
    for key, value in ev.args:
        args += [f"--{key}", value]
    return args


def evaluator_argv(rig: RigConfig, side: SideConfig, resume: bool, *, routes: str | None = None,
                   checkpoint: str | None = None, host: str | None = None) -> list[str]:
    """`conda run -n ENV --no-capture-output --cwd DIR python SCRIPT --host H --port N ...`"""
    ev = side.evaluator
    return python_argv(rig, ev, ev.script, evaluator_args(side, resume, routes=routes, checkpoint=checkpoint,
                                                          host=host))


def evaluator_env(side: SideConfig) -> dict[str, str]:
    """The env the config sets, explicitly (added to the harness's inherited environment), and Python
    unbuffered: Leaderboard 2 and carla_garage flush nothing, so with stdout to a file their lines come in
    8 KiB bursts, the log's mtime (the heartbeat) moves in jumps and the last lines before a kill (the hang's
    explanation among them) are lost. The config may override it."""
    return {"PYTHONUNBUFFERED": "1", **dict(side.evaluator.env)}


def harness_argv(rig: RigConfig, side: str) -> list[str]:
    """The exact tokens ops/probes/chain.py's is_harness_of looks for (`-c RIG` ... `harness SIDE`)."""
    return [sys.executable, "-m", "console", "-c", rig.path, "harness", side]


def harness_log(rig: RigConfig, side: str) -> str:
    return str(side_dir(rig, side) / "harness.log")


@dataclass(frozen=True)
class LaunchPlan:
    side: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(hash=False)
    cwd: str
    decision: rr.ResumeDecision
    backup: str | None                       # where the backup will go (None: no checkpoint to copy)
    refused: str | None
    checks: tuple[Check, ...]
    plan: Plan                               # the guard's Op.RELAUNCH plan
    harness_argv: tuple[str, ...]
    checkpoint_bytes: bytes | None = field(default=None, repr=False, hash=False)
    runplan: RunPlan = field(default_factory=lambda: RunPlan("nothing", (), (), "not planned"), hash=False)
    subset: SubsetRun | None = None          # mode subset: the run's own routes file and checkpoint
    routes_bytes: bytes | None = field(default=None, repr=False, hash=False)
    gate: dict | None = field(default=None, repr=False, hash=False)   # preflight + resources (issue 21)

    @property
    def allowed(self) -> bool:
        return self.refused is None

    @property
    def resume(self) -> bool:
        """`--resume True` is in the argv (only in mode resume: a subset run starts its own file)."""
        return self.decision.resume and self.runplan.mode == "resume"

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd, "resume": self.resume,
                "resume_reason": self.decision.reason if self.runplan.mode != "subset" else self.runplan.reason,
                "runs": list(self.runplan.runs), "overwrites": list(self.runplan.overwrites),
                "run_plan": self.runplan.to_json(),
                "subset": self.subset.to_json() if self.subset else None, "backup": self.backup, "refused": self.refused,
                "side": self.side, "checks": [c.to_json() for c in self.checks],
                "harness_argv": list(self.harness_argv),
                "checkpoint": {"verdict": self.decision.verdict, "completed": self.decision.completed,
                               "total": self.decision.total, "routes": self.decision.routes},
                "verdicts": dict(self.plan.verdicts), **(self.gate or {})}


# ---- checks ---------------------------------------------------------------------------------------


def _running_check(snap: SideSnapshot) -> tuple[str, Check]:
    ev = snap.evaluator
    if ev.verdict.state is State.UNKNOWN:
        return "UNKNOWN", Check("running", "unknown", f"evaluator UNKNOWN: {ev.verdict.summary}")
    members = ev.chain.members
    if members:
        who = ", ".join(f"{m.role} {m.proc.pid}" for m in members)
        return "ALIVE", Check("running", "refused", f"side {snap.name} already running ({who}): a second "
                              "evaluator would fight for the same server")
    if snap.server.verdict.state is State.ALIVE and snap.clients != 0:
        # The field notes' incident: an evaluator started by hand (no --traffic-manager-port, so not in
        # the chain) drives this server; a second evaluator on it would fight the first.
        cev = snap.clients_evidence.line() if snap.clients_evidence else "not measured"
        if snap.clients is None:
            return "UNKNOWN", Check("running", "unknown", f"clients of the server UNKNOWN: {cev}")
        return "ALIVE", Check("running", "refused", f"the server of side {snap.name} has {snap.clients} client(s) "
                              f"that are not this side's chain ({cev}): it is busy, a second evaluator would "
                              "fight for it")
    return "DEAD", Check("running", "ok", "no harness, wrapper or evaluator of this side; no client on the server")


def _log_check(side: SideConfig) -> Check:
    """The evaluator's output is appended to its log: a FIFO there would block the harness on open() (and
    the log's mtime, the heartbeat, would mean nothing); a directory or a device is no log either."""
    path = side.evaluator.path(side.evaluator.log)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return Check("log", "ok", f"{path} will be created")
    except OSError as e:
        return Check("log", "unknown", f"log {path}: {e}")
    if not stat.S_ISREG(mode):
        return Check("log", "refused", f"log {path} exists and is not a regular file: remove it")
    return Check("log", "ok", f"{path} is appended to")


def _managed_server_check(snap: SideSnapshot, sc: SideConfig) -> tuple[str, Check]:
    """server.managed_by_evaluator: the (unpatched Bench2Drive) evaluator starts its own server, on
    find_free_port(--port): the console starts none, and one already on N would push the evaluator's to N+3."""
    v = snap.server.verdict
    env = dict(sc.evaluator.env)
    if env.get("B2D_EXTERNAL_SERVER") == "1":
        return "UNKNOWN", Check("server", "refused", "server.managed_by_evaluator is set but the evaluator env "
                                "has B2D_EXTERNAL_SERVER=1 (the patch that makes it use an external server): "
                                "choose one")
    if "CARLA_ROOT" not in env and "CARLA_ROOT" not in os.environ:
        return "UNKNOWN", Check("server", "refused", "server.managed_by_evaluator: the evaluator starts "
                                "$CARLA_ROOT/CarlaUE4.sh and dies with KeyError: 'CARLA_ROOT' when it is unset: "
                                "set evaluator.env.CARLA_ROOT")
    if v.state is State.DEAD:
        return "MANAGED", Check("server", "ok", f"no server on {sc.server.rpc_port}: the evaluator starts its own "
                                f"(-graphicsadapter={gpu_rank(sc)})")
    if v.state is State.ALIVE:
        return "ALIVE-MANAGED", Check("server", "refused", f"a server already runs on {sc.server.rpc_port} "
                                      f"({v.summary}): the evaluator would start its own on the next free port "
                                      f"(find_free_port → {sc.server.rpc_port + 3}); stop it first (reclaim)")
    return "UNKNOWN", Check("server", "unknown", f"server UNKNOWN: {v.summary}")


def gpu_rank(sc: SideConfig) -> int:
    """The adapter an evaluator-managed server gets (`--gpu-rank` → -graphicsadapter): the one adapter
    polling last accepted (server.adapter), else the first candidate."""
    return sc.server.adapter if sc.server.adapter is not None else sc.server.adapter_candidates[0]


def _server_check(snap: SideSnapshot) -> tuple[str, Check]:
    v = snap.server.verdict
    if v.state is State.ALIVE:
        return "ALIVE", Check("server", "ok", v.summary)
    if v.state is State.DEAD:
        return "DEAD", Check("server", "refused", f"server DEAD ({v.summary}): start it first "
                             f"(carla-console adapter {snap.name})")
    if v.state is State.HUNG:
        return "HUNG", Check("server", "refused", f"server HUNG ({v.summary}): restart it first "
                             f"(carla-console restart-server {snap.name})")
    return "UNKNOWN", Check("server", "unknown", f"server UNKNOWN: {v.summary}")


async def _ports_check(live: LiveRig, side: SideConfig) -> tuple[str, Check]:
    try:
        scan = await scan_ports(live)
        data = scan.to_json()["sides"][side.name]
    except Exception as e:  # fail-closed: a scan that broke is UNKNOWN, with the raw error
        return "UNKNOWN", Check("ports", "unknown", f"port scan failed: {type(e).__name__}: {e}")
    conflicts = data.get("conflicts") or []
    verdict = str(data.get("verdict") or data.get("state") or ("CONFLICT" if conflicts else "CLEAR")).upper()
    if conflicts:
        verdict = "CONFLICT"
    if verdict == "CLEAR":
        return "CLEAR", Check("ports", "ok", f"planned {data.get('planned')}: no conflict")
    if verdict == "CONFLICT":
        text = "; ".join(f"{c.get('port')}: {c.get('reason')}" for c in conflicts)
        sug = data.get("suggestion")
        return "CONFLICT", Check("ports", "refused", f"port conflicts: {text}"
                                 + (f" (nearest free block: {sug})" if sug else ""))
    return "UNKNOWN", Check("ports", "unknown", f"port scan {verdict}: {data.get('error') or data}")


def env_names(conda_json: str) -> set[str] | str:
    """Env names from `conda env list --json` ({"envs": [prefix, ...]}); an error string if unreadable.

    A named env lives at ROOT/envs/NAME; the root prefix (the first entry) is `base`.
    """
    try:
        prefixes = json.loads(conda_json)["envs"]
        if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
            raise TypeError("envs is not a list of paths")
    except (ValueError, KeyError, TypeError) as e:
        return f"unparseable `conda env list --json` ({e}): {conda_json[:200]!r}"
    names = {posixpath.basename(p.rstrip("/")) for p in prefixes} | set(prefixes)
    if prefixes:
        names.add("base")
    return names


async def _conda_check(live: LiveRig, side: SideConfig) -> Check:
    rig: RigConfig = live.config
    ev = side.evaluator
    argv = [*rig.conda, "env", "list", "--json"]
    res = await live.hosts[ev.host].run(argv, timeout=CONDA_LIST_TIMEOUT_S)
    if not res.ok:
        return Check("conda-env", "unknown", f"`{' '.join(argv)}` on {ev.host}: {res.why()}")
    names = env_names(res.stdout)
    if isinstance(names, str):
        return Check("conda-env", "unknown", names)
    if ev.conda_env not in names:
        return Check("conda-env", "refused", f"conda env {ev.conda_env!r} missing on {ev.host} "
                     f"(`conda env list`: {', '.join(sorted(n for n in names if '/' not in n))})")
    return Check("conda-env", "ok", f"conda env {ev.conda_env} present")


def _checkpoint_check(d: rr.ResumeDecision) -> Check:
    status = {rr.CP_OK: "ok", rr.CP_ABSENT: "ok", rr.CP_MISMATCH: "refused"}.get(d.verdict, "unknown")
    return Check("checkpoint", status, d.refused or d.reason)


# ---- which routes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubsetRun:
    """A subset run's own files, in the state dir (the user's routes file and checkpoint are not its)."""
    dir: str
    routes: str
    checkpoint: str

    def to_json(self) -> dict:
        return {"dir": self.dir, "routes": self.routes, "checkpoint": self.checkpoint}


def subset_run(rig: RigConfig, side: str, at: float | None = None) -> SubsetRun:
    at = time.time() if at is None else at
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(at)) + f".{int((at % 1) * 1e6):06d}"
    d = side_dir(rig, side) / "runs" / stamp
    return SubsetRun(str(d), str(d / "routes.xml"), str(d / "result.json"))


def setup_tries_path(rig: RigConfig, side: str):
    return side_dir(rig, side) / "setup_tries.json"


def read_setup_tries(rig: RigConfig, side: str) -> dict[str, int]:
    """Per route, how many tries an agent set-up failure has had (a missing/bad file: none yet)."""
    try:
        raw = json.loads(setup_tries_path(rig, side).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int)} if isinstance(raw, dict) else {}


def _run_plan(rig: RigConfig, sc: SideConfig, decision: rr.ResumeDecision, cp: rr.CheckpointRead,
              retired: Collection[str], routes: rr.CheckpointRead | None = None) -> tuple[RunPlan, bytes | None]:
    """The routes this launch runs (ops/actions/runplan.py), from the bytes the decision was made on.
    routes: the routes file as read on the evaluator's host (None: read it here)."""
    if decision.refused:
        return RunPlan("nothing", (), (), f"not planned: {decision.refused}"), None
    ev = sc.evaluator
    rt = routes if routes is not None else rr.read_bytes(ev.path(ev.routes))
    if rt.data is None:
        why = f"routes file unreadable, routes to run UNKNOWN: {rt.error or ev.path(ev.routes) + ' does not exist'}"
        return RunPlan("nothing", (), (), why, refused=why), None
    rf = parse_routes(rt.data)
    if isinstance(rf, ParseError):
        why = f"routes file unparseable, routes to run UNKNOWN: {rf.reason}"
        return RunPlan("nothing", (), (), why, refused=why), None
    args = dict(ev.args)
    if args.get("routes-subset"):
        return RunPlan("fresh" if not decision.resume else "resume", (), (),
                       "--routes-subset set by hand: the routes it runs are the evaluator's choice"), rt.data
    try:
        reps = int(args.get("repetitions", "1"))
    except ValueError:
        reps = 1   # decide() has refused it already
    parsed = parse_checkpoint(cp.data) if (decision.resume and cp.data is not None) else None
    ckpt = parsed if parsed is not None and not isinstance(parsed, ParseError) else None
    return plan_runs(ckpt, rf.checkpoint_ids(reps), retired=retired,
                     setup_tries=read_setup_tries(rig, sc.name)), rt.data


def prepare_attempt(lp: LaunchPlan, sc: SideConfig) -> None:
    """What must exist before the evaluator starts: the checkpoint's folder (Bench2Drive never creates it:
    `open(path, 'w')` → FileNotFoundError at start, every attempt) and a subset run's routes file."""
    ev = sc.evaluator
    os.makedirs(posixpath.dirname(ev.path(ev.checkpoint)) or ".", exist_ok=True)
    if lp.subset is not None and lp.routes_bytes is not None:
        from ops.actions.merge import subset_routes_xml
        os.makedirs(lp.subset.dir, exist_ok=True)
        atomic.write_bytes(lp.subset.routes, subset_routes_xml(lp.routes_bytes, lp.runplan.runs))


# ---- the plan -------------------------------------------------------------------------------------


async def fresh_tables(live: LiveRig, timeout: float | None = None) -> dict[str, ProcTable]:
    """Every host's process table, bounded by the sides' own probe timeout (a hung host costs that, not
    more). Zombies (this container's PID 1 never reaps orphans) are no chain members: find_chain skips
    state Z, and the prober re-reads the last poll's chain pids rather than trusting its scan cache."""
    rig: RigConfig = live.config
    names = {h for s in rig.sides.values() for h in (s.server.host, s.evaluator.host)}
    if timeout is None:
        timeout = max(s.server.probe_timeout_s for s in rig.sides.values())
    return await live.prober.tables(names, timeout)


async def side_snapshot(live: LiveRig, side: str) -> tuple[SideSnapshot, dict[str, ProcTable]]:
    """The snapshot a destructive plan is built on: fresh chain members, the RPC probe forced."""
    tables = await fresh_tables(live)
    return await live.prober.side(side, rpc=True, tables=tables), tables


async def plan_launch(live: LiveRig, side: str, *, snapshot: SideSnapshot | None = None,
                      retired: Collection[str] = (), alert: bool = False) -> LaunchPlan:
    """Everything a launch of `side` would do, and whether it is refused. Reads only."""
    rig: RigConfig = live.config
    sc = rig.side(side)
    ev_host = live.hosts[sc.evaluator.host]
    checks: list[Check] = []
    if not ev_host.is_local:
        # The harness is started on that host (ssh + setsid) and runs the evaluator as its child there.
        why = remote.refusal(rig, ev_host, sc)
        checks.append(Check("host", "refused", why) if why else
                      Check("host", "ok", f"evaluator host {ev_host.label}: the supervisor runs there"))
    snap = snapshot or (await side_snapshot(live, side))[0]
    ev_word, running = _running_check(snap)
    srv_word, server = _managed_server_check(snap, sc) if sc.server.managed_by_evaluator else _server_check(snap)
    (port_word, ports), conda = await asyncio.gather(_ports_check(live, sc), _conda_check(live, sc))
    rt: rr.CheckpointRead | None = None
    if ev_host.is_local:
        decision, cp = rr.decide_for(sc)
    else:
        decision, cp, rt = await remote.decide_on(ev_host, sc)
    checks += [running, server, ports, conda, _checkpoint_check(decision)]
    rp, routes_bytes = _run_plan(rig, sc, decision, cp, retired, rt)
    if rp.refused:
        checks.append(Check("runs", "refused", rp.refused))
    if ev_host.is_local:
        checks.append(_log_check(sc))
    else:
        checks.append(Check("log", *await remote.log_check(ev_host, sc.evaluator.path(sc.evaluator.log))))
    # issue 21: preflight, VRAM budget, disk floor; alert: the unattended harness notifies its refusals
    gate = await launch_gate(live, side, snap, alert=alert)
    checks += [Check(c.name, c.status, c.detail) for c in gate.checks]
    verdicts = {"server": srv_word, "evaluator": ev_word, "checkpoint": decision.verdict, "ports": port_word}
    failing = [c for c in checks if c.status != "ok"]
    refused = "; ".join(c.detail for c in failing) or None
    subset = subset_run(rig, side) if rp.mode == "subset" else None
    address = server_address(live.hosts, sc)
    argv = (evaluator_argv(rig, sc, False, routes=subset.routes, checkpoint=subset.checkpoint, host=address)
            if subset else evaluator_argv(rig, sc, decision.resume and rp.mode == "resume", host=address))
    backup = rr.planned_backup(rig, sc, cp.data is not None)
    evidence = (f"evaluator argv: {' '.join(argv)}", f"cwd: {sc.evaluator.cwd}",
                f"resume: {decision.reason}", f"runs ({rp.mode}): {rp.reason}",
                f"runs: {' '.join(rp.runs) or 'none'}", f"overwrites: {' '.join(rp.overwrites) or 'none'}",
                f"backup: {backup or 'none (no checkpoint)'}"
                + ("" if ev_host.is_local or not backup else f" (written on {sc.evaluator.host} by the supervisor)"),
                *(f"{c.name}: {c.status}: {c.detail}" for c in checks), *gate.lines())
    hargv = harness_argv(rig, side) if ev_host.is_local else remote.harness_argv(rig, side, sc.evaluator.host)
    plan = make_plan(Op.RELAUNCH, side, sc.evaluator.host, (), verdicts, evidence=evidence,
                     action=f"start the detached harness `{' '.join(hargv)}`",
                     precondition=refused)
    return LaunchPlan(side, tuple(argv), evaluator_env(sc), sc.evaluator.cwd, decision, backup,
                      refused or plan.refused, tuple(checks), plan, tuple(hargv), cp.data, rp, subset,
                      routes_bytes, gate.to_json())


# ---- executing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchResult:
    outcome: Outcome
    harness_pid: int | None = None
    backup: str | None = None
    harness_status: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    def to_json(self) -> dict:
        return {**self.outcome.to_json(), "harness_pid": self.harness_pid, "backup": self.backup,
                "harness_status": self.harness_status}


def reread_same(lp: LaunchPlan, sc: SideConfig) -> tuple[bool, bytes | None, str]:
    """The checkpoint must still be the bytes the decision was made from (else decide again)."""
    now = rr.read_bytes(sc.evaluator.path(sc.evaluator.checkpoint))
    if now.error:
        return False, None, f"checkpoint UNKNOWN at launch: {now.error}"
    if now.data != lp.checkpoint_bytes:
        return False, None, "the checkpoint changed since the plan: plan again"
    return True, now.data, ""


def needs_server(lp: LaunchPlan, sc: SideConfig) -> bool:
    """Refused only because the server is DEAD, on a side whose config lets the console start it."""
    return (sc.server.auto_start and lp.plan.verdicts.get("server") == "DEAD"
            and "UNKNOWN" not in lp.plan.verdicts.values())


async def start_server(live: LiveRig, side: str, conf: Confirmation) -> tuple[bool, str]:
    """Adapter polling (its own plan, verdicts and guard pass) to bring a DEAD server up."""
    from ops.actions.adapter import poll_adapters
    report = await poll_adapters(live, side, conf)
    acc = report.accepted
    if acc is not None:
        return True, f"server started on adapter {acc.adapter} (+{acc.delta_mb} MiB)"
    return False, f"adapter polling found no server: {report.refused or report.stopped_on or 'no candidate rendered'}"


async def execute_launch(live: LiveRig, lp: LaunchPlan, conf: Confirmation, *, guard: Guard | None = None,
                         wait_s: float = HARNESS_START_WAIT_S) -> LaunchResult:
    """Through the guard: re-read the checkpoint, back it up, start the harness detached, wait until it
    reports (its harness.json names its pid) so that a refusal by the harness is not lost."""
    rig: RigConfig = live.config
    sc = rig.side(lp.side)
    guard = guard or Guard(live.hosts, Audit(rig.state_dir))
    got: dict = {}

    host = live.hosts[sc.evaluator.host]

    async def remote_action(_plan: Plan) -> tuple[bool, str]:
        # The checkpoint must still be the bytes the operator confirmed; the harness backs it up on its
        # host before its first attempt (where the file is), as before every attempt.
        now = await remote.read_bytes(host, sc.evaluator.path(sc.evaluator.checkpoint))
        if now.error:
            return False, f"checkpoint on {host.name} UNKNOWN at launch: {now.error}"
        if now.data != lp.checkpoint_bytes:
            return False, "the checkpoint changed since the plan: plan again"
        log = remote.harness_log(rig, lp.side)
        pid, st = await remote.start_harness(host, rig, lp.side, list(lp.harness_argv), sc.evaluator.cwd, wait_s)
        got["pid"] = pid
        got["status"] = st.status if isinstance(st, HarnessState) else None
        if pid is None:
            return False, str(st)
        if not isinstance(st, HarnessState):
            return False, (f"harness {pid} started on {host.name} but has not reported within {wait_s:.0f} s "
                           f"({st}); see {log} there")
        got["backup"] = st.attempts[0].backup if st.attempts else None
        if st.status in ("refused", "failed"):
            return False, f"harness {pid} on {host.name} {st.status}: {st.detail}"
        return True, (f"harness {pid} on {host.name} {st.status} (attempt {st.attempt}); backup {got['backup']} "
                      f"there; log {log} there")

    async def action(_plan: Plan) -> tuple[bool, str]:
        same, data, why = reread_same(lp, sc)
        if not same:
            return False, why
        got["backup"] = rr.backup(rig, sc, data)
        from ops.platform.local import spawn_detached
        log = harness_log(rig, lp.side)
        side_dir(rig, lp.side).mkdir(parents=True, exist_ok=True)
        pid = spawn_detached(list(lp.harness_argv), cwd=sc.evaluator.cwd, log_path=log)
        got["pid"] = pid
        st = await wait_harness(rig, lp.side, pid, wait_s)
        got["status"] = st.status if isinstance(st, HarnessState) else None
        if not isinstance(st, HarnessState):
            return False, f"harness {pid} started but has not reported within {wait_s:.0f} s ({st}); see {log}"
        if st.status in ("refused", "failed"):
            return False, f"harness {pid} {st.status}: {st.detail}"
        return True, f"harness {pid} {st.status} (attempt {st.attempt}); backup {got['backup']}; log {log}"

    try:
        async with side_lock(rig.state_dir, lp.side, wait_s + LOCK_EXTRA_S):
            # Checked again under the lock: a launch that waited for another one sees its harness now (the
            # rest of the plan stands: the checkpoint is re-read by the action itself).
            running = await _running_now(live, sc)
            if running is not None:
                again = make_plan(Op.RELAUNCH, lp.side, lp.plan.host, (), {**lp.plan.verdicts, "evaluator": "ALIVE"},
                                  lp.plan.evidence, lp.plan.action, precondition=running)
                return LaunchResult(await guard.execute(again, conf))
            outcome = await guard.execute(lp.plan, conf, action=action if host.is_local else remote_action)
    except SideBusy as e:
        busy = make_plan(Op.RELAUNCH, lp.side, lp.plan.host, (), lp.plan.verdicts, lp.plan.evidence,
                         lp.plan.action, precondition=str(e))
        return LaunchResult(await guard.execute(busy, conf))
    return LaunchResult(outcome, got.get("pid"), got.get("backup"), got.get("status"))


async def _running_now(live, sc: SideConfig) -> str | None:
    """Why the side is running now (a fresh process table: its harness, wrapper or evaluator), or None."""
    from ops.probes.chain import find_chain
    host = live.hosts[sc.evaluator.host]
    table = (await fresh_tables(live))[sc.evaluator.host]
    if not table.ok:
        return f"process table of {host.name} UNKNOWN: {table.error}"
    chain = find_chain(table, live.config, sc, local=host.is_local)
    if chain.members:
        who = ", ".join(f"{m.role} {m.proc.pid}" for m in chain.members)
        return f"side {sc.name} already running ({who}): a second evaluator would fight for the same server"
    return None


async def wait_harness(rig: RigConfig, side: str, pid: int, within: float) -> HarnessState | str:
    """The harness's state once it has started an attempt (or given up); a reason string otherwise."""
    from ops.platform.procs import read_proc
    deadline = time.monotonic() + within
    last = "no state yet"
    while True:
        st = read_state(rig, side)
        if isinstance(st, HarnessState) and st.pid == pid and st.status not in ("starting",):
            return st
        if isinstance(st, str):
            last = st
        proc = read_proc(pid)
        if proc is None or proc.state == "Z":
            st = read_state(rig, side)
            if isinstance(st, HarnessState) and st.pid == pid:
                return st
            return f"harness {pid} exited without a state"
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(0.1)
