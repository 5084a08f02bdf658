"""Resource guards: disk, host memory, VRAM budgets and foreign GPU load, each with its level.

    disk     free space on the filesystems of each side's checkpoint and log and of the state dir:
             below `disk_critical_mb` no new attempt starts (a checkpoint rewritten on a full disk is
             truncated: the run's record is lost), below `disk_warning_mb` a warning
    memory   available memory of every host (the Windows host through PowerShell) against its floor
    budget   `vram_budget_mb` (server + model) of a side against what its GPU has free beside the other
             sides on it (their budgets reserved, not just what they hold now)
    foreign  processes on a side's GPU that belong to no side (someone else's job), with their memory

A reading that cannot be taken is UNKNOWN with the raw error, never OK and never 0.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ops.model import RigConfig
from ops.platform.base import Host
from ops.platform.local import LocalHost
from ops.platform.procs import ProcTable
from ops.probes.gpuview import GpuRow, GpuView, gpu_view
from ops.probes.vram import VramReading, read_vram
from ops.tristate import StateWord


class Level(StateWord):
    OK = "OK"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"
    UNKNOWN = "UNKNOWN"


# ---- disk -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FsReading:
    host: str
    mount: str | None
    free_mb: int | None
    total_mb: int | None
    uses: tuple[str, ...]          # "A checkpoint /w/A/results/result.json", "state dir /s", ...
    level: Level
    error: str | None = None

    def line(self) -> str:
        if self.free_mb is None:
            return f"{self.host}:{self.mount or '?'} UNKNOWN ({self.error}) — {', '.join(self.uses)}"
        return (f"{self.host}:{self.mount} {self.level.value}: {self.free_mb} MiB free of {self.total_mb} MiB "
                f"— {', '.join(self.uses)}")

    def to_json(self) -> dict:
        return {"host": self.host, "mount": self.mount, "free_mb": self.free_mb, "total_mb": self.total_mb,
                "uses": list(self.uses), "level": self.level.value, "error": self.error}


def disk_level(free_mb: int | None, warning_mb: int, critical_mb: int) -> Level:
    if free_mb is None:
        return Level.UNKNOWN
    if free_mb < critical_mb:
        return Level.CRITICAL
    return Level.WARNING if free_mb < warning_mb else Level.OK


# The console's own machine, for the state dir of a rig none of whose hosts is local.
_console_host = LocalHost("console")


async def read_disks(rig: RigConfig, hosts: dict[str, Host], timeout: float) -> list[FsReading]:
    """One reading per (host, filesystem), naming everything of the rig that lives on it."""
    wanted: dict[str, dict[str, list[str]]] = {}   # host -> path -> uses
    for name, sc in rig.sides.items():
        ev = sc.evaluator
        wanted.setdefault(ev.host, {}).setdefault(ev.path(ev.checkpoint), []).append(f"{name} checkpoint")
        wanted.setdefault(ev.host, {}).setdefault(ev.path(ev.log), []).append(f"{name} log")
    local = next((n for n, h in hosts.items() if h.is_local), None)
    wanted.setdefault(local or "console", {}).setdefault(os.path.join(rig.state_dir, "x"), []).append("state dir")
    res_cfg = rig.resources

    async def free_of(host_name: str, paths: list[str]) -> dict[str, tuple[str, int, int] | str]:
        host = hosts.get(host_name) or _console_host
        try:
            return await asyncio.wait_for(host.platform.disk_free(paths, timeout), timeout)
        except asyncio.TimeoutError:
            return {p: f"statvfs timed out after {timeout:.0f} s (a hung mount?)" for p in paths}

    # Every host at once: a hung mount or host never holds the others' readings back.
    answers = await asyncio.gather(*(free_of(h, list(paths)) for h, paths in wanted.items()))
    out: list[FsReading] = []
    for (host_name, paths), got in zip(wanted.items(), answers):
        by_fs: dict[str, list[str]] = {}
        sizes: dict[str, tuple[int, int]] = {}
        for path, r in got.items():
            uses = [f"{u} {path if u != 'state dir' else rig.state_dir}" for u in paths[path]]
            if isinstance(r, str):
                out.append(FsReading(host_name, None, None, None, tuple(uses), Level.UNKNOWN, r))
                continue
            by_fs.setdefault(r[0], []).extend(uses)
            sizes[r[0]] = (r[1], r[2])
        for mount, uses in by_fs.items():
            free, total = sizes[mount]
            out.append(FsReading(host_name, mount, free, total, tuple(uses),
                                 disk_level(free, res_cfg.disk_warning_mb, res_cfg.disk_critical_mb)))
    return out


def side_disks(disks: Iterable[FsReading], side: str) -> list[FsReading]:
    """The filesystems a side writes to: its checkpoint and log, and the state dir (backups, state)."""
    return [d for d in disks if any(u.startswith((f"{side} checkpoint", f"{side} log", "state dir")) for u in d.uses)]


# ---- host memory ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemReading:
    host: str
    available_mb: int | None
    total_mb: int | None
    floor_mb: int
    level: Level
    error: str | None = None

    def to_json(self) -> dict:
        return {"host": self.host, "available_mb": self.available_mb, "total_mb": self.total_mb,
                "floor_mb": self.floor_mb, "level": self.level.value, "error": self.error}


async def read_memory(rig: RigConfig, name: str, host: Host, timeout: float) -> MemReading:
    floor = rig.resources.memory_floor(rig.hosts[name])
    got = await host.platform.memory(timeout)
    if isinstance(got, str):
        return MemReading(name, None, None, floor, Level.UNKNOWN, got)
    avail, total = got
    return MemReading(name, avail, total, floor, Level.WARNING if avail < floor else Level.OK)


# ---- GPUs: budgets and foreign load ---------------------------------------------------------------


@dataclass(frozen=True)
class SidePids:
    """A side's processes as the GPU host sees them: its server's, and its evaluator chain's (with their
    descendants) when the evaluator runs on the same host."""
    side: str
    host: str
    server: frozenset[int]
    model: frozenset[int]

    @property
    def all(self) -> frozenset[int]:
        return self.server | self.model


@dataclass(frozen=True)
class ForeignProc:
    host: str
    gpu: int
    pid: int
    used_mb: int | None
    name: str | None

    def to_json(self) -> dict:
        return {"host": self.host, "gpu": self.gpu, "pid": self.pid, "used_mb": self.used_mb, "name": self.name}


def foreign_load(view: GpuView, sides: Iterable[SidePids], table: ProcTable | None) -> list[ForeignProc] | None:
    """Processes on this host's GPUs that belong to no side; None when the process list is unreadable."""
    if view.apps is None:
        return None
    ours = set().union(*(s.all for s in sides if s.host == view.host)) if sides else set()
    out = []
    for a in view.apps:
        if a.pid in ours:
            continue
        gpu = view.by_uuid(a.gpu_uuid)
        proc = table.procs.get(a.pid) if table is not None and table.ok else None
        name = (proc.cmdline[0] if proc.cmdline else None) if proc is not None and proc.cmdline else None
        out.append(ForeignProc(view.host, gpu.index if gpu else -1, a.pid, a.used_mb, name))
    return out


@dataclass(frozen=True)
class BudgetFit:
    side: str
    budget_mb: int | None
    gpu: int | None
    need_mb: int | None          # the budget less what the side already holds on that GPU
    available_mb: int | None     # free on the GPU less what the other sides' budgets still reserve
    fits: bool | None            # None: unknown
    detail: str
    reserved: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"budget_mb": self.budget_mb, "gpu": self.gpu, "need_mb": self.need_mb,
                "available_mb": self.available_mb, "fits": self.fits, "detail": self.detail,
                "reserved_by_others_mb": dict(self.reserved)}


def _held(view: GpuView, gpu: GpuRow, pids: frozenset[int]) -> int | None:
    used = [a.used_mb for a in view.apps_on(gpu.uuid) if a.pid in pids]
    return None if any(u is None for u in used) else sum(u for u in used if u is not None)


def budget_fit(rig: RigConfig, side: str, view: GpuView | None, pids: dict[str, SidePids]) -> BudgetFit:
    """Does `side`'s vram_budget_mb fit on its GPU beside the sides already on it?"""
    sc = rig.side(side)
    budget = sc.vram_budget_mb
    if budget is None:
        return BudgetFit(side, None, None, None, None, True, "no vram_budget_mb configured")
    if view is None or not view.ok:
        why = view.evidence.error if view is not None else "no GPU reading"
        return BudgetFit(side, budget, None, None, None, None, f"GPU unreadable: {why}")
    if view.apps is None:
        return BudgetFit(side, budget, None, None, None, None, "per-process GPU memory unreadable: cannot tell "
                         "what the sides already hold")
    me = pids[side]
    gpu = view.gpu_of(set(me.server)) or (view.gpus[0] if len(view.gpus) == 1 else None)
    if gpu is None:
        return BudgetFit(side, budget, None, None, None, None, f"{len(view.gpus)} GPUs on {view.host} and this "
                         "side's server is on none of them yet: which GPU it will use is unknown")
    if gpu.free_mb is None:
        return BudgetFit(side, budget, gpu.index, None, None, None, f"gpu{gpu.index} memory unreadable ([N/A])")
    mine = _held(view, gpu, me.all)
    if mine is None:
        return BudgetFit(side, budget, gpu.index, None, None, None, "this side's GPU memory is unreadable")
    reserved: dict[str, int] = {}
    for other, op in pids.items():
        if other == side or op.host != view.host:
            continue
        held = _held(view, gpu, op.all)
        if held is None:
            return BudgetFit(side, budget, gpu.index, None, None, None, f"side {other}'s GPU memory is unreadable")
        if held == 0:
            continue   # not on this GPU
        other_budget = rig.side(other).vram_budget_mb or held
        reserved[other] = max(0, other_budget - held)
    need = max(0, budget - mine)
    available = gpu.free_mb - sum(reserved.values())
    others = ", ".join(f"{k} still reserves {v} MiB" for k, v in reserved.items()) or "no other side on it"
    detail = (f"side {side} needs {need} MiB more (vram_budget_mb {budget}, holds {mine}) on gpu{gpu.index} "
              f"{gpu.name}: {gpu.free_mb} MiB free of {gpu.total_mb}, {others} → {available} MiB available")
    return BudgetFit(side, budget, gpu.index, need, available, need <= available, detail, reserved)


def side_pids(rig: RigConfig, snaps: dict, tables: dict[str, ProcTable]) -> dict[str, SidePids]:
    """Each side's pids on its server's host, from prober snapshots (SideSnapshot)."""
    out = {}
    for name, snap in snaps.items():
        sc = rig.side(name)
        server = frozenset(p.pid for p in snap.server.procs)
        model: set[int] = set()
        if sc.evaluator.host == sc.server.host:
            table = tables.get(sc.evaluator.host)
            for pid in snap.evaluator.chain.pids:
                model.add(pid)
                if table is not None and table.ok:
                    model.update(p.pid for p in table.descendants(pid))
        out[name] = SidePids(name, sc.server.host, server, frozenset(model))
    return out


# ---- all of it ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    disks: tuple[FsReading, ...]
    memory: tuple[MemReading, ...]
    gpus: dict[str, GpuView]
    foreign: dict[str, list[ForeignProc] | None]      # GPU host -> foreign processes (None: unreadable)
    budgets: dict[str, BudgetFit]
    critical_mb: int = 0
    took_ms: float = 0.0

    def warnings(self) -> list[str]:
        out = []
        for d in self.disks:
            if d.level is Level.CRITICAL:
                out.append(f"disk CRITICAL {d.line()}: no new attempt starts below {self.critical_mb} MiB")
            elif d.level is Level.WARNING:
                out.append(f"disk low {d.line()}")
            elif d.level is Level.UNKNOWN:
                out.append(f"disk UNKNOWN {d.line()}")
        for m in self.memory:
            if m.level is Level.WARNING:
                out.append(f"memory low on {m.host}: {m.available_mb} MiB available, floor {m.floor_mb} MiB")
            elif m.level is Level.UNKNOWN:
                out.append(f"memory UNKNOWN on {m.host}: {m.error}")
        for host, procs in self.foreign.items():
            for p in procs or ():
                out.append(f"foreign GPU load on {host} gpu{p.gpu}: pid {p.pid} ({p.name or '?'}) holds "
                           f"{'?' if p.used_mb is None else p.used_mb} MiB and belongs to no side")
        for side, b in self.budgets.items():
            if b.budget_mb is not None and b.fits is False:
                out.append(f"VRAM budget of side {side} does not fit: {b.detail}")
        return out

    def to_json(self) -> dict:
        return {"disks": [d.to_json() for d in self.disks], "memory": [m.to_json() for m in self.memory],
                "gpus": {h: {"evidence": v.evidence.line(),
                             "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "used_mb": g.used_mb,
                                       "total_mb": g.total_mb} for g in v.gpus]} for h, v in self.gpus.items()},
                "foreign": {h: None if p is None else [x.to_json() for x in p] for h, p in self.foreign.items()},
                "budgets": {s: b.to_json() for s, b in self.budgets.items()},
                "warnings": self.warnings(), "took_ms": round(self.took_ms, 1)}


def gpu_hosts(rig: RigConfig) -> set[str]:
    return {sc.server.host for sc in rig.sides.values()}


GpuReader = Callable[[str], Awaitable[VramReading]]   # host name -> its GPU reading


async def read_views(rig: RigConfig, hosts: dict[str, Host], timeout: float,
                     read: GpuReader | None = None) -> dict[str, GpuView]:
    """Each GPU host's view. read: where the reading comes from (the prober's, shared with the VRAM pane);
    a new reading of each host otherwise."""
    names = sorted(gpu_hosts(rig))
    reader = read or (lambda n: read_vram(rig.hosts[n], hosts[n], timeout))
    readings = await asyncio.gather(*(reader(n) for n in names))
    return {n: gpu_view(n, r) for n, r in zip(names, readings)}


async def read_resources(rig: RigConfig, hosts: dict[str, Host], snaps: dict, tables: dict[str, ProcTable],
                         timeout: float = 5.0, read: GpuReader | None = None) -> Resources:
    t0 = time.perf_counter()
    host_names = sorted({h for sc in rig.sides.values() for h in (sc.server.host, sc.evaluator.host)})
    disks, views, mem = await asyncio.gather(
        read_disks(rig, hosts, timeout), read_views(rig, hosts, timeout, read),
        asyncio.gather(*(read_memory(rig, n, hosts[n], timeout) for n in host_names)))
    pids = side_pids(rig, snaps, tables)
    foreign = {h: foreign_load(v, pids.values(), tables.get(h)) if v.ok else None for h, v in views.items()}
    budgets = {s: budget_fit(rig, s, views.get(sc.server.host), pids) for s, sc in rig.sides.items()
               if sc.vram_budget_mb is not None}
    return Resources(tuple(disks), tuple(mem), views, foreign, budgets, rig.resources.disk_critical_mb,
                     (time.perf_counter() - t0) * 1e3)


async def resources_now(live, snaps: dict) -> Resources:
    """The resources beside a set of snapshots (status, the TUI), on the process tables of this beat."""
    rig: RigConfig = live.config
    timeout = max(s.server.probe_timeout_s for s in rig.sides.values())
    names = {h for s in rig.sides.values() for h in (s.server.host, s.evaluator.host)}
    tables = await live.prober.tables(names, timeout, share=True)
    limit = resource_timeout(rig)
    # The GPUs as the VRAM pane last read them (its cadence): a display and its warnings, not a decision.
    return await read_resources(rig, live.hosts, snaps, tables, limit,
                                read=lambda n: live.prober.gpu_reading(n, limit))


RESOURCE_TIMEOUT_MIN_S = 15.0


def resource_timeout(rig: RigConfig) -> float:
    """The bound of one resource reading (nvidia-smi, df, PowerShell): off the 1 Hz path (a launch's gate,
    status, the TUI's 30 s loop), so a loaded host gets longer than a poll's probe_timeout_s before the
    reading is UNKNOWN."""
    return max(RESOURCE_TIMEOUT_MIN_S, *(s.server.probe_timeout_s for s in rig.sides.values()))
