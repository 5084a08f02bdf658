"""Preflight: will this side's evaluator start, in its env, against its server, with its model? Ask first.

The field notes lost hours to what was knowable before the first route: `import pkg_resources` failing in a
new env, two leaderboard trees where the first on sys.path silently wins, `carla` beside `carla-ue5-api`,
a client of another minor version than the server. ops/scripts/preflight.py gathers the facts inside the
side's pinned env (from a file, with a timeout); here they become verdicts:

    PASS    measured and fine            WARN   measured, allowed, shown (a patch-level version skew, a
    FAIL    measured and wrong: refuses         debugging run the config opted into)
    UNKNOWN could not measure: refuses   SKIP   does not apply (no torch in the env)

UNKNOWN refuses like FAIL (fail-closed) but says "could not measure" with the raw error, never "broken".
"""
from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from ops.model import RigConfig, SideConfig
from ops.platform.base import Host, ScriptUnavailable
from ops.platform.pinned import python_argv
from ops.probes.gpuview import GpuRow, GpuView
from ops.probes.server import server_address
from ops.tristate import StateWord

SCRIPT = "preflight.py"
STAGES = ("python", "carla", "modules", "agent", "torch")


class Word(StateWord):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"
    SKIP = "SKIP"


@dataclass(frozen=True)
class PreflightCheck:
    name: str
    verdict: Word
    summary: str
    evidence: tuple[str, ...] = ()

    @property
    def blocks(self) -> bool:
        return self.verdict in (Word.FAIL, Word.UNKNOWN)

    def to_json(self) -> dict:
        return {"name": self.name, "verdict": self.verdict.value, "summary": self.summary,
                "evidence": list(self.evidence)}


@dataclass(frozen=True)
class PreflightReport:
    side: str
    checks: tuple[PreflightCheck, ...]
    took_ms: float
    debug_run: bool
    env: str

    @property
    def verdict(self) -> Word:
        words = {c.verdict for c in self.checks}
        for w in (Word.FAIL, Word.UNKNOWN, Word.WARN):
            if w in words:
                return w
        return Word.PASS

    @property
    def refused(self) -> str | None:
        bad = [f"{c.name} {c.verdict.value}: {c.summary}" for c in self.checks if c.blocks]
        return "; ".join(bad) or None

    def check(self, name: str) -> PreflightCheck | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict:
        return {"side": self.side, "verdict": self.verdict.value, "refused": self.refused,
                "debug_run": self.debug_run, "env": self.env, "took_ms": round(self.took_ms, 1),
                "checks": [c.to_json() for c in self.checks]}


# ---- facts ----------------------------------------------------------------------------------------


def parse_facts(stdout: str) -> dict[str, dict]:
    """The script's stage lines by stage; the agent's own prints in between are ignored."""
    facts: dict[str, dict] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("stage"), str):
            facts[d["stage"]] = d
    return facts


def _under(path: str | None, root: str) -> bool:
    if not path:
        return False
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def _minor(v: str) -> tuple[str, ...]:
    return tuple(v.strip().split(".")[:2])


# ---- the checks -----------------------------------------------------------------------------------


def debug_check(side: SideConfig) -> PreflightCheck:
    """Config only: --debug >= 1 draws the route's waypoints into the world, and CARLA's debug drawings
    show in camera images (carla#6705): the model sees another input, the score is not the benchmark's."""
    level = side.debug_level
    ev = (f"evaluator.args debug = {level}", f"evaluator.debug_run = {side.evaluator.debug_run}")
    if level < 1:
        return PreflightCheck("debug", Word.PASS, "no --debug: a scored run", ev)
    if side.evaluator.debug_run:
        return PreflightCheck("debug", Word.WARN, f"DEBUGGING RUN (--debug {level}, opted in by "
                              "evaluator.debug_run): the route is drawn into the camera images; not a score", ev)
    return PreflightCheck("debug", Word.FAIL, f"--debug {level} in the evaluator args draws the route into the "
                          "camera images (the model's input changes): refused for a scored run; set "
                          "evaluator.debug_run: true to run it as a debugging run", ev)


def _missing_stage(stage: str, why: str) -> PreflightCheck:
    return PreflightCheck(stage, Word.UNKNOWN, f"not measured: {why}")


def carla_checks(facts: dict, side: SideConfig, why: str) -> list[PreflightCheck]:
    c = facts.get("carla")
    if c is None:
        return [_missing_stage("carla-import", why), _missing_stage("carla-version", why),
                _missing_stage("carla-dists", why)]
    dists = c.get("dists") or []
    names = sorted({d.get("name") for d in dists})
    dist_ev = tuple(f"{d.get('name')} {d.get('version')} at {d.get('location')}" for d in dists) or (
        "neither carla nor carla-ue5-api installed (importlib.metadata)",)
    out = []
    if c.get("ok"):
        out.append(PreflightCheck("carla-import", Word.PASS, f"carla imports from {c.get('file')}",
                                  (f"carla.__file__ = {c.get('file')}",)))
    else:
        out.append(PreflightCheck("carla-import", Word.FAIL, f"import carla failed: {c.get('error')}",
                                  (f"raised at {c.get('where')}", f"missing module: {c.get('missing')}")))
    if "carla" in names and "carla-ue5-api" in names:
        out.append(PreflightCheck("carla-dists", Word.FAIL, "carla and carla-ue5-api are both installed: two "
                                  "incompatible C++ extensions share the module name `carla`; uninstall one",
                                  dist_ev))
    else:
        out.append(PreflightCheck("carla-dists", Word.PASS, f"one carla distribution ({', '.join(names) or 'none'})",
                                  dist_ev))
    out.append(version_check(c, side))
    return out


def version_check(c: dict, side: SideConfig) -> PreflightCheck:
    client = c.get("client_version")
    server = c.get("server_version")
    ev = (f"client {client or '?'} ({c.get('client_error') or 'carla.Client.get_client_version()'})",
          f"server {server or '?'} ({c.get('server_error') or 'get_server_version() on port ' + str(side.server.rpc_port)})")
    if not c.get("ok"):
        return PreflightCheck("carla-version", Word.UNKNOWN, "carla does not import: no client version", ev)
    if not client:
        return PreflightCheck("carla-version", Word.UNKNOWN, f"client version unreadable: {c.get('client_error')}", ev)
    if not server:
        if side.server.managed_by_evaluator:
            return PreflightCheck("carla-version", Word.WARN, f"client {client}; the evaluator starts its own server: "
                                  "its version is checked by nobody before the run", ev)
        return PreflightCheck("carla-version", Word.UNKNOWN, f"client {client}; server did not answer: "
                              f"{c.get('server_error')}", ev)
    if _minor(client) != _minor(server):
        return PreflightCheck("carla-version", Word.FAIL, f"client {client} against server {server}: "
                              "major.minor differ (the RPC protocol is not compatible)", ev)
    if client.strip() != server.strip():
        return PreflightCheck("carla-version", Word.WARN, f"client {client} against server {server}: patch differs "
                              "(same major.minor: allowed)", ev)
    return PreflightCheck("carla-version", Word.PASS, f"client and server {client}", ev)


def modules_check(facts: dict, side: SideConfig, why: str) -> PreflightCheck:
    m = facts.get("modules")
    if m is None:
        return _missing_stage("evaluator-modules", why)
    cwd = side.evaluator.cwd
    ev = [f"sys.path (as the evaluator's): {m.get('sys_path')}"]
    bad, missing = [], []
    for spec in m.get("specs") or []:
        name = spec.get("module")
        if not spec.get("found"):
            missing.append(f"{name}: {spec.get('error')}")
            ev.append(f"{name}: not found ({spec.get('error')})")
            continue
        where = spec.get("origin") or ", ".join(spec.get("locations") or []) or "?"
        ev.append(f"{name} from {where}")
        paths = [spec.get("origin")] if spec.get("origin") else list(spec.get("locations") or [])
        if not paths or not all(_under(p, cwd) for p in paths):
            bad.append(f"{name} from {where}")
    agent = facts.get("agent") or {}
    for mod, f in sorted((agent.get("loaded") or {}).items()):
        if mod.split(".")[0] in ("leaderboard", "srunner") and not _under(f, cwd):
            bad.append(f"{mod} from {f}")
    if missing:
        return PreflightCheck("evaluator-modules", Word.FAIL, "the evaluator's modules do not import as it will "
                              f"import them: {'; '.join(missing)}", tuple(ev))
    if bad:
        return PreflightCheck("evaluator-modules", Word.FAIL, f"imported from a tree outside the side's cwd {cwd} "
                              f"(two trees: the first on sys.path wins): {'; '.join(bad[:6])}", tuple(ev))
    return PreflightCheck("evaluator-modules", Word.PASS, f"leaderboard and srunner from {cwd}", tuple(ev))


def agent_check(facts: dict, side: SideConfig, why: str) -> PreflightCheck:
    a = facts.get("agent")
    if a is None:
        return _missing_stage("agent-import", why)
    want = side.evaluator.path(a.get("agent") or "")
    ev = [f"import_module({a.get('module')!r}) after sys.path.insert(0, dirname({a.get('agent')!r}))"]
    if not a.get("ok"):
        ev += [f"raised at {a.get('where')}", f"missing module: {a.get('missing')}",
               f"import chain: {' -> '.join(a.get('chain') or []) or '?'}"]
        return PreflightCheck("agent-import", Word.FAIL, f"the agent module does not import: {a.get('error')}",
                              tuple(ev))
    got = a.get("file")
    ev.append(f"agent module from {got}")
    if got and os.path.realpath(got) != os.path.realpath(want):
        return PreflightCheck("agent-import", Word.FAIL, f"`import {a.get('module')}` loaded {got}, not the "
                              f"configured agent {want} (a module of that name comes first)", tuple(ev))
    if not a.get("entry_point"):
        return PreflightCheck("agent-import", Word.FAIL, f"{got} has no get_entry_point(): the evaluator cannot "
                              "find the agent class", tuple(ev))
    if not _under(got, side.evaluator.cwd):
        return PreflightCheck("agent-import", Word.WARN, f"agent imports from {got}, outside the side's cwd",
                              tuple(ev))
    return PreflightCheck("agent-import", Word.PASS, f"agent imports from {got} (not constructed)", tuple(ev))


def torch_checks(facts: dict, side: SideConfig, why: str, server_gpu: GpuRow | None,
                 server_gpu_why: str) -> list[PreflightCheck]:
    t = facts.get("torch")
    if t is None:
        return [_missing_stage("torch-cuda", why), _missing_stage("model-gpu", why)]
    cvd = t.get("cuda_visible_devices")
    ev = (f"torch {t.get('version')} (CUDA build {t.get('cuda_build')})", f"CUDA_VISIBLE_DEVICES={cvd}")
    if not t.get("installed"):
        skip = "torch is not installed in the env"
        return [PreflightCheck("torch-cuda", Word.SKIP, skip, ev), PreflightCheck("model-gpu", Word.SKIP, skip, ev)]
    if t.get("error"):
        return [PreflightCheck("torch-cuda", Word.FAIL, f"torch does not import: {t.get('error')}", ev),
                PreflightCheck("model-gpu", Word.UNKNOWN, "torch does not import", ev)]
    devices = t.get("devices") or []
    if not t.get("cuda_available") or not devices:
        return [PreflightCheck("torch-cuda", Word.FAIL, f"torch {t.get('version')} sees no CUDA device "
                               f"(CUDA_VISIBLE_DEVICES={cvd}): the model would run on the CPU or fail", ev),
                PreflightCheck("model-gpu", Word.UNKNOWN, "no CUDA device", ev)]
    dev = devices[0]
    dev_ev = (*ev, *(f"cuda:{d.get('index')} {d.get('name')} {d.get('uuid')}" for d in devices))
    out = [PreflightCheck("torch-cuda", Word.PASS, f"cuda:0 is {dev.get('name')}", dev_ev)]
    if server_gpu is None:
        out.append(PreflightCheck("model-gpu", Word.UNKNOWN, f"the server's GPU is not known: {server_gpu_why}",
                                  dev_ev))
        return out
    srv_ev = (*dev_ev, f"server renders on gpu{server_gpu.index} {server_gpu.name} {server_gpu.uuid}")
    if not dev.get("uuid"):
        out.append(PreflightCheck("model-gpu", Word.UNKNOWN, "this torch does not report device uuids: cannot tell "
                                  "whether the model shares the server's GPU", srv_ev))
    elif dev.get("uuid") == server_gpu.uuid and not side.evaluator.share_server_gpu:
        out.append(PreflightCheck("model-gpu", Word.FAIL, f"the model's cuda:0 is the GPU the server renders on "
                                  f"(gpu{server_gpu.index} {server_gpu.name}): they would fight for it; set "
                                  "CUDA_VISIBLE_DEVICES in evaluator.env, or evaluator.share_server_gpu: true",
                                  srv_ev))
    elif dev.get("uuid") == server_gpu.uuid:
        out.append(PreflightCheck("model-gpu", Word.WARN, f"the model shares gpu{server_gpu.index} with the server "
                                  "(evaluator.share_server_gpu)", srv_ev))
    else:
        out.append(PreflightCheck("model-gpu", Word.PASS, f"the model's cuda:0 ({dev.get('uuid')}) is not the "
                                  f"server's gpu{server_gpu.index}", srv_ev))
    return out


def decide(side: SideConfig, facts: dict[str, dict], why: str, server_gpu: GpuRow | None,
           server_gpu_why: str) -> list[PreflightCheck]:
    return [debug_check(side), *carla_checks(facts, side, why), modules_check(facts, side, why),
            agent_check(facts, side, why), *torch_checks(facts, side, why, server_gpu, server_gpu_why)]


# ---- running it -----------------------------------------------------------------------------------


def agent_arg(side: SideConfig) -> str | None:
    return next((v for k, v in side.evaluator.args if k in ("agent", "a")), None)


def server_gpu(view: GpuView | None, server_pids: set[int], one_gpu_ok: bool = True) -> tuple[GpuRow | None, str]:
    """The GPU the side's server renders on: the one whose process list holds its pid."""
    if view is None:
        return None, "no GPU reading"
    if not view.ok:
        return None, f"GPU reading failed: {view.evidence.error}"
    found = view.gpu_of(server_pids) if server_pids else None
    if found is not None:
        return found, ""
    if one_gpu_ok and len(view.gpus) == 1:
        return view.gpus[0], ""
    if not server_pids:
        return None, f"no server process running and {len(view.gpus)} GPUs on {view.host}"
    return None, f"server pids {sorted(server_pids)} are on no GPU's process list on {view.host}"


async def run_script(rig: RigConfig, side: SideConfig, hosts: dict[str, Host]) -> tuple[dict[str, dict], str, float]:
    """(facts by stage, why a stage is missing, took ms)."""
    t0 = time.perf_counter()
    ev = side.evaluator
    host = hosts[ev.host]
    try:
        script = await host.script_path(SCRIPT)
    except ScriptUnavailable as e:
        return {}, f"script not available on {ev.host}: {e}", (time.perf_counter() - t0) * 1e3
    agent = agent_arg(side)
    args = ["--script", ev.path(ev.script), "--agent", agent or "", "--host", server_address(hosts, side),
            "--port", str(side.server.rpc_port), "--rpc-timeout", str(side.server.probe_timeout_s)]
    argv = python_argv(rig, ev, script, args)
    res = await host.run(argv, timeout=rig.resources.preflight_timeout_s, env=dict(ev.env) or None, cwd=ev.cwd)
    took = (time.perf_counter() - t0) * 1e3
    facts = parse_facts(res.stdout)
    if res.ok and "done" in facts:
        return facts, "", took
    last = next((s for s in reversed(STAGES) if s in facts), None)
    stuck = STAGES[STAGES.index(last) + 1] if last and last != STAGES[-1] else STAGES[0]
    why = f"`{' '.join(argv[:6])} ...` {res.why()}"
    if res.timed_out:
        why = (f"timed out after {rig.resources.preflight_timeout_s:.0f} s in stage {stuck!r} "
               f"(resources.preflight_timeout_s)")
    elif res.stderr.strip():
        why += f"; stderr: {res.stderr.strip()[-400:]}"
    return facts, why, took


async def preflight_side(rig: RigConfig, side: str, hosts: dict[str, Host], *, server_pids: set[int],
                         gpu_view: GpuView | None | Awaitable[GpuView | None]) -> PreflightReport:
    """gpu_view may be an awaitable: the GPU reading then runs while the script does (a launch's budget)."""
    t0 = time.perf_counter()
    sc = rig.side(side)
    if agent_arg(sc) is None:
        if inspect.isawaitable(gpu_view):
            await gpu_view
        checks = [debug_check(sc), PreflightCheck("agent-import", Word.FAIL, "evaluator.args has no agent: the "
                                                  "evaluator requires --agent")]
        return PreflightReport(side, tuple(checks), (time.perf_counter() - t0) * 1e3, sc.evaluator.debug_run,
                               sc.evaluator.conda_env)
    if inspect.isawaitable(gpu_view):
        (facts, why, _took), view = await asyncio.gather(run_script(rig, sc, hosts), gpu_view)
    else:
        (facts, why, _took), view = await run_script(rig, sc, hosts), gpu_view
    gpu, gpu_why = server_gpu(view, server_pids)
    checks = decide(sc, facts, why, gpu, gpu_why)
    return PreflightReport(side, tuple(checks), (time.perf_counter() - t0) * 1e3,
                           sc.debug_level >= 1 and sc.evaluator.debug_run, sc.evaluator.conda_env)


def summary_lines(rep: PreflightReport) -> list[str]:
    """For the CLI and the TUI's launch modal: one line per check, evidence indented."""
    lines = [f"preflight {rep.side} (env {rep.env}): {rep.verdict.value} in {rep.took_ms / 1e3:.1f} s"
             + ("  [DEBUGGING RUN]" if rep.debug_run else "")]
    for c in rep.checks:
        lines.append(f"  {c.verdict.value:8} {c.name:18} {c.summary}")
    return lines
