"""The launch gate of issue 21: preflight, VRAM budget and disk floor, as checks of every launch.

`plan_launch` (and so the dry-run, the TUI's launch modal and the harness before every attempt) asks
`launch_gate`; a FAIL or UNKNOWN refuses the launch with its evidence. Below the critical disk floor no
new attempt starts: a checkpoint rewritten on a full disk is truncated, and with it the run's record.
The harness asks with alert=True (nobody is watching it): its refusals for disk or VRAM budget are alerts
(notify_hook); a dry-run, the CLI and the TUI show theirs to the operator who asked.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

from ops.model import RigConfig
from ops.notify import Notifier, NotifyEvent
from ops.probes.preflight import PreflightReport, preflight_side, summary_lines
from ops.probes.resources import BudgetFit, FsReading, Level, Resources, read_resources, resource_timeout, side_disks


@dataclass(frozen=True)
class GateCheck:
    name: str
    status: str            # ok | refused | unknown (launch.Check's words)
    detail: str


@dataclass(frozen=True)
class Gate:
    checks: tuple[GateCheck, ...]
    preflight: PreflightReport | None      # None only when the gate itself broke (then a check says so)
    resources: Resources | None

    def to_json(self) -> dict:
        return {"preflight": self.preflight.to_json() if self.preflight else None,
                "resources": self.resources.to_json() if self.resources else None}

    def lines(self) -> list[str]:
        return summary_lines(self.preflight) if self.preflight else []


def preflight_check(rep: PreflightReport) -> GateCheck:
    if rep.refused:
        status = "refused" if any(c.verdict.value == "FAIL" for c in rep.checks) else "unknown"
        return GateCheck("preflight", status, f"preflight: {rep.refused}")
    warns = [f"{c.name}: {c.summary}" for c in rep.checks if c.verdict.value == "WARN"]
    return GateCheck("preflight", "ok", f"preflight {rep.verdict.value} in {rep.took_ms / 1e3:.1f} s"
                     + (f" (warnings: {'; '.join(warns)})" if warns else ""))


def budget_check(b: BudgetFit | None) -> GateCheck | None:
    if b is None or b.budget_mb is None:
        return None
    if b.fits is True:
        return GateCheck("vram-budget", "ok", b.detail)
    if b.fits is False:
        return GateCheck("vram-budget", "refused", f"VRAM budget does not fit: {b.detail}")
    return GateCheck("vram-budget", "unknown", f"VRAM budget UNKNOWN: {b.detail}")


def disk_check(rig: RigConfig, disks: list[FsReading]) -> GateCheck:
    crit = [d for d in disks if d.level is Level.CRITICAL]
    unknown = [d for d in disks if d.level is Level.UNKNOWN]
    if crit:
        return GateCheck("disk", "refused", "disk below the critical floor "
                         f"({rig.resources.disk_critical_mb} MiB): " + "; ".join(d.line() for d in crit)
                         + ": no new attempt starts (a checkpoint rewritten on a full disk is truncated)")
    if unknown:
        return GateCheck("disk", "unknown", "disk free space UNKNOWN: " + "; ".join(d.line() for d in unknown))
    low = [d for d in disks if d.level is Level.WARNING]
    return GateCheck("disk", "ok", ("WARNING: " + "; ".join(d.line() for d in low)) if low else
                     "; ".join(d.line() for d in disks))


async def launch_gate(live, side: str, snap, *, alert: bool = False) -> Gate:
    """Every side's snapshot (for the GPU's owners), the resources, then the preflight in the side's env.
    A gate that breaks refuses (UNKNOWN, with the error), it never lets a launch through unchecked."""
    try:
        return await _gate(live, side, snap, alert)
    except Exception as e:
        return Gate((GateCheck("preflight", "unknown", f"preflight/resource gate failed: {type(e).__name__}: {e}"),),
                    None, None)


async def _gate(live, side: str, snap, alert: bool) -> Gate:
    rig: RigConfig = live.config
    sc = rig.side(side)
    timeout = max(s.server.probe_timeout_s for s in rig.sides.values())
    names = {h for s in rig.sides.values() for h in (s.server.host, s.evaluator.host)}
    tables = await live.prober.tables(names, timeout)
    others = [n for n in rig.sides if n != side]
    snaps = dict(zip(others, await asyncio.gather(*(live.prober.side(n, rpc=False, tables=tables)
                                                     for n in others))))
    snaps[side] = snap
    # The preflight's conda start and imports take seconds: the resources are read meanwhile.
    limit = resource_timeout(rig)
    # A launch decides on the GPUs: a new reading (shared with a VRAM read under way, which is as new).
    res_task = asyncio.ensure_future(read_resources(rig, live.hosts, snaps, tables, limit,
                                                    read=lambda n: live.prober.gpu_reading(n, limit, fresh=True)))

    async def view():
        return (await res_task).gpus.get(sc.server.host)
    try:
        rep = await preflight_side(rig, side, live.hosts, server_pids={p.pid for p in snap.server.procs},
                                   gpu_view=view())
    finally:
        res = await res_task
    checks = [preflight_check(rep), disk_check(rig, side_disks(res.disks, side))]
    b = budget_check(res.budgets.get(side))
    if b is not None:
        checks.append(b)
    for c in checks if alert else ():
        if c.status == "refused" and c.name in ("disk", "vram-budget"):
            await notify_hook(rig, f"{c.name}-refused", side, f"[{rig.name}] {side}: launch refused ({c.name})",
                              c.detail)
    return Gate(tuple(checks), rep, res)


NOTIFY_DRAIN_S = 10.0   # a harness that refuses exits next: give the delivery thread this long, no more


async def notify_hook(rig: RigConfig, kind: str, side: str, title: str, body: str) -> None:
    """THE resource-alert hook (issue 21): the alert goes to state_dir/alerts.jsonl and, where ops/notify.py
    (apprise), to the rig's `notify:` URLs, waited for at most NOTIFY_DRAIN_S off the event
    loop. Never raises: an alert that cannot be sent must not change a refusal."""
    event = {"time": time.time(), "kind": kind, "side": side, "title": title, "body": body}
    try:
        os.makedirs(rig.state_dir, exist_ok=True)
        with open(os.path.join(rig.state_dir, "alerts.jsonl"), "a") as f:
            f.write(json.dumps(event) + "\n")
    except OSError:
        pass   # the state dir may be the full disk itself: the refusal still says it
    if not rig.notify:
        return
    try:
        notifier = Notifier.for_rig(rig)
        if notifier.send(NotifyEvent(kind=kind, side=side, title=title, body=body)):
            await notifier.drain(NOTIFY_DRAIN_S)
    except Exception:  # a notifier problem is no reason to change a launch decision
        pass
