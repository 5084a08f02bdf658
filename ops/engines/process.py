"""The process engine: a side's run is the detached harness on the evaluator's host (ops/actions/launch.py
starts it, ops/actions/harness.py is it). Its targets are processes (host, pid, create time)."""
from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ops.actions.guard import Confirmation, Plan, Target
from ops.engines.base import Run, Started
from ops.model import RigConfig
from ops.platform.base import Host
from ops.probes.harness_state import HarnessState, read_state_on
from ops.tristate import Evidence, State

KIND = "process"
ENDED = frozenset({"finished", "failed", "stopped", "refused"})


class ProcessEngine:
    kind = KIND

    def __init__(self, rig: RigConfig, hosts: Mapping[str, Host]) -> None:
        self.rig = rig
        self.hosts = hosts

    async def start(self, live: Any, sides: Sequence[str], conf: Confirmation) -> list[Started]:
        """Each side: launch's plan (refusals and all) → the guard → the detached harness."""
        from ops.actions.launch import execute_launch, plan_launch
        out = []
        for side in sides:
            lp = await plan_launch(live, side)
            res = await execute_launch(live, lp, conf)
            o = res.outcome
            # The harness's (pid, create time) is in its state file; observe() reads it from there.
            out.append(Started(side, o.ok, o.detail or (o.refused or ""), None, o.refused))
        return out

    async def observe(self, live: Any) -> dict[str, Run]:
        """Each side's harness from its state file, alive only if its (pid, create time) is in the host's
        process table (one shared table per host, the prober's)."""
        hosts = {s.evaluator.host for s in self.rig.sides.values()}
        timeout = max(s.server.probe_timeout_s for s in self.rig.sides.values())
        tables = await live.prober.tables(hosts, timeout, share=True)
        runs: dict[str, Run] = {}
        names = list(self.rig.sides)
        # Concurrently: a remote side's state is read through its host, and a slow host must not hold the others.
        states = await asyncio.gather(*(read_state_on(self.hosts[self.rig.sides[n].evaluator.host], self.rig, n, timeout)
                                        for n in names))
        for name, st in zip(names, states):
            sc = self.rig.sides[name]
            host = sc.evaluator.host
            if st is None:
                continue
            if isinstance(st, str):
                runs[name] = Run(name, KIND, State.UNKNOWN, "UNKNOWN", host,
                                 evidence=(Evidence("harness.json", False, error=st),))
                continue
            table = tables[host]
            if not table.ok:
                runs[name] = Run(name, KIND, State.UNKNOWN, st.status.upper(), host,
                                 evidence=(Evidence("process table", False, error=str(table.error)),))
                continue
            p = table.procs.get(st.pid)
            alive = p is not None and abs(p.create_time - st.create_time) <= 0.05 and p.state != "Z"
            state = State.ALIVE if alive else State.DEAD
            word = st.status.upper() if alive or st.status in ENDED else "GONE"
            runs[name] = Run(name, KIND, state, word, host, targets=_targets(host, st, alive),
                             evidence=(Evidence("harness", True, detail=f"pid {st.pid} {st.status}"),),
                             detail={"attempt": st.attempt})
        return runs

    async def stop_plan(self, live: Any, side: str, *, heartbeat: str | None = None) -> Plan:
        """Stopping a process side is the recovery's chain plan (harness → wrapper → evaluator)."""
        from ops.actions.recovery import recovery_plan
        return (await recovery_plan(live, side)).kill_plan


def _targets(host: str, st: HarnessState, alive: bool) -> tuple[Target, ...]:
    return (Target(host, st.pid, st.create_time, "harness", ()),) if alive else ()
