"""SSH faults against a real OpenSSH sshd on 127.0.0.1 (tests/support/conftest_ssh.py): side A's server and
evaluator are reached through it, side B stays local. Each scenario has its own sim rig.

- the connection dropped between plan and execute (sshd killed): the kill is refused, nothing signalled,
  state UNKNOWN until re-probed; once sshd is back a re-probe sees the side again and the plan can run.
- a host whose commands hang (sshd SIGSTOPped): A times out to UNKNOWN, B still probes FRESH in its
  own time, and nothing destructive proceeds on A.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil
import pytest

from ops.actions.guard import Confirmation
from ops.actions.recovery import execute_kill, recovery_plan
from ops.config import load_config
from ops.rig import open_rig
from ops.tristate import State
from sim import rig as sim
from tests.faults.common import inject, rewrite, wait_stale
from tests.faults.harness_kit import Audit, Procs, Records, alive, checkpoint_path, key

pytestmark = pytest.mark.ssh
YES = Confirmation(True, "--yes", typed="A")


@pytest.fixture
def rig(tmp_path, ssh_cfg):
    d = tmp_path / "sim"
    rig_yaml = sim.up(d, start_evaluators=True, routes=60, route_s=1.0, tick_s=0.2, stall_s=2.0)

    def edit(c):
        c["hosts"]["far"] = {"type": "ssh", "os": "linux", "address": "127.0.0.1", "port": ssh_cfg.port,
                             "user": ssh_cfg.user, "known_hosts": ssh_cfg.known_hosts,
                             "client_keys": list(ssh_cfg.client_keys), "connect_timeout_s": 2,
                             "nvidia_smi": c["hosts"]["local"]["nvidia_smi"]}
        a = c["sides"]["A"]
        a["server"]["host"] = a["evaluator"]["host"] = "far"
        a["server"]["probe_timeout_s"] = 2
        c["sides"]["B"]["server"]["probe_timeout_s"] = 2
    try:
        yield d, rewrite(rig_yaml, edit, name="ssh.yaml")
    finally:
        sim.down(d)


def _states(snap) -> dict[str, str]:
    return {"server": snap.server.verdict.state.value, "evaluator": snap.evaluator.verdict.state.value,
            "heartbeat": snap.heartbeat.beat.value}


@pytest.mark.scenario("ssh-dropped-mid-operation")
def test_ssh_dropped_between_plan_and_execute(rig, sshd) -> None:
    d, cfg = rig
    rec = Records({s: checkpoint_path(d, s) for s in ("A", "B")})
    inject(d, "A", "hang")
    wait_stale(cfg, "A")
    audit = Audit(d / "state")
    mark = audit.mark()

    async def go():
        async with open_rig(load_config(cfg)) as live:
            plan = await recovery_plan(live, "A")
            assert plan.allowed, plan.refused
            planned = [key(t.pid, t.create_time) for t in plan.kill_plan.targets]
            assert [t.role for t in plan.kill_plan.targets] == ["wrapper", "shell", "evaluator"]
            before = Procs.snapshot()
            sshd.stop()                                   # the connection drops under the operation
            kill = await execute_kill(live, plan, YES, grace_s=1)
            assert not kill.ok and kill.step.status == "refused", kill.step
            assert all(alive(k) for k in planned), "a target was signalled over a dead connection"
            Procs.check(before, planned=[])               # nothing half-applied
            audit.need(mark, "stop-chain", "refused")
            down = await live.prober.side("A", rpc=True)
            assert _states(down) == {"server": "UNKNOWN", "evaluator": "UNKNOWN", "heartbeat": "UNKNOWN"}
            again = await live.prober.side("A", rpc=False)
            assert again.evaluator.verdict.state is State.UNKNOWN        # stays UNKNOWN while sshd is down
            sshd.start()
            # Re-probed on the same live rig: the host retries its connection after its retry_s (1 s).
            for _ in range(10):
                back = await live.prober.side("A", rpc=True)
                if back.evaluator.verdict.state is not State.UNKNOWN:
                    break
                await asyncio.sleep(0.5)
            assert _states(back) == {"server": "ALIVE", "evaluator": "ALIVE", "heartbeat": "STALE"}, _states(back)
            # The job can now be done, through the same plan-then-execute path.
            plan2 = await recovery_plan(live, "A")
            assert plan2.allowed and [key(t.pid, t.create_time) for t in plan2.kill_plan.targets] == planned
            before2 = Procs.snapshot()
            kill2 = await execute_kill(live, plan2, YES, grace_s=2)
            assert kill2.ok, kill2.step
            Procs.check(before2, planned)
            audit.need(mark, "stop-chain", "done", planned)
    asyncio.run(go())
    rec.check()


def _sshd_tree(sshd) -> list[psutil.Process]:
    root = psutil.Process(sshd.proc.pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.scenario("host-commands-hang")
def test_a_hanging_host_is_unknown_and_the_rest_stays_responsive(rig, sshd) -> None:
    d, cfg = rig
    rec = Records({s: checkpoint_path(d, s) for s in ("A", "B")})
    inject(d, "A", "hang")
    wait_stale(cfg, "A")
    audit = Audit(d / "state")
    mark = audit.mark()

    async def timed(coro):
        t0 = time.monotonic()
        out = await coro
        return out, time.monotonic() - t0

    async def go():
        async with open_rig(load_config(cfg)) as live:
            plan = await recovery_plan(live, "A", cpu_window_s=0)      # made while the host still answers
            assert plan.allowed, plan.refused
            before = Procs.snapshot()
            frozen = _sshd_tree(sshd)
            for p in frozen:
                os.kill(p.pid, signal.SIGSTOP)            # every command on that host now hangs
            try:
                (a, ta), (b, tb) = await asyncio.gather(timed(live.prober.side("A", rpc=True)),
                                                        timed(live.prober.side("B", rpc=True)))
                assert _states(b) == {"server": "ALIVE", "evaluator": "ALIVE", "heartbeat": "FRESH"}, _states(b)
                assert tb < 2 + 4, f"B took {tb:.1f} s behind a hanging host"     # its own timeout + rpc
                assert _states(a) == {"server": "UNKNOWN", "evaluator": "UNKNOWN", "heartbeat": "UNKNOWN"}
                text = " ".join(e.line() for e in a.server.verdict.evidence).lower()
                assert "timeout" in text or "timed out" in text, text
                assert ta < 30, f"A's probe took {ta:.1f} s: not bounded"
                # execute re-plans first: the host hangs now, so UNKNOWN refuses and nothing is signalled.
                t0 = time.monotonic()
                kill = await execute_kill(live, plan, YES, grace_s=1)
                assert not kill.ok and kill.step.status == "refused" and "UNKNOWN" in kill.step.detail, kill.step
                assert time.monotonic() - t0 < 20
                t0 = time.monotonic()
                both = await live.prober.all(rpc=False)

                assert both["B"].heartbeat.beat.value == "FRESH" and time.monotonic() - t0 < 15
            finally:
                for p in frozen:
                    try:
                        os.kill(p.pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            Procs.check(before, planned=[])
            audit.need(mark, "stop-chain", "refused")
            assert not audit.destructive(mark)
    asyncio.run(go())
    rec.check()
