"""Polling shares work per host: the sides of one beat read each host's process table once, however many
sides the host has and however far apart a loaded machine starts their polls; a forced probe (a plan, a
verification, `g`) reads afresh. Four `type: local` host entries stand in for four hosts: each has its own
scanner, as separate hosts would."""
from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from ops.model import HostConfig, RigConfig
from ops.platform.factory import make_hosts
from ops.platform.procs import LocalProcScanner
from ops.probes.prober import Prober, display_within_s
from tests.tui.fakes import side_config

HOSTS = 4
SIDES = 16


def rig(tmp: Path) -> RigConfig:
    sides = {}
    for i in range(SIDES):
        name = f"s{i + 1:02d}"
        cfg = side_config(name, 40000 + 10 * i, 45000 + i, host=f"h{i % HOSTS}")
        ev = cfg.evaluator.__class__(**{**cfg.evaluator.__dict__, "cwd": str(tmp / name)})
        sides[name] = cfg.__class__(**{**cfg.__dict__, "evaluator": ev})
    # One beat is one period of poll_s on the monotonic clock: a period longer than the test makes the
    # count independent of how slowly a loaded machine runs the sixteen polls.
    return RigConfig(path=str(tmp / "rig.yaml"), name="beat", state_dir=str(tmp / "state"), conda=("conda",),
                     poll_s=1e9, hosts={f"h{k}": HostConfig(f"h{k}", "local") for k in range(HOSTS)}, sides=sides)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    real = LocalProcScanner.scan

    def counted(self, fresh_pids=frozenset()):
        seen[self.host] += 1
        return real(self, fresh_pids)
    monkeypatch.setattr(LocalProcScanner, "scan", counted)
    return seen


def test_one_process_table_per_host_per_beat(tmp_path: Path, scans: Counter[str]) -> None:
    async def run() -> None:
        r = rig(tmp_path)
        hosts = await make_hosts(r.hosts)
        p = Prober(r, hosts, rpc_every_s=1e9, vram_every_s=1e9)
        snaps = await asyncio.gather(*(p.side(n) for n in r.sides))   # one beat, as the app's loops
        assert len(snaps) == SIDES
        assert scans == Counter({f"h{k}": 1 for k in range(HOSTS)}), scans
        await p.side("s01", rpc=True)                                  # forced: a fresh table
        assert scans["h0"] == 2 and sum(scans.values()) == HOSTS + 1
        for h in hosts.values():
            await h.close()
    asyncio.run(run())


def test_only_a_display_beat_takes_a_recent_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """within_s (how old a reading may be: one a remote agent pushed) is 1.5 poll periods on a display's
    beat (display_within_s), and 0 on every other poll: a plan, a check, a command, `g` measure now."""
    from ops.platform.linux_local import LinuxLocal
    asked: list[tuple[str, float]] = []
    real_stat, real_table = LinuxLocal.stat_file, LinuxLocal.process_table

    async def stat_file(self, path, timeout, within_s=0.0):
        asked.append(("stat", within_s))
        return await real_stat(self, path, timeout, within_s)

    async def process_table(self, timeout, fresh_pids=frozenset(), within_s=0.0):
        asked.append(("table", within_s))
        return await real_table(self, timeout, fresh_pids, within_s)
    monkeypatch.setattr(LinuxLocal, "stat_file", stat_file)
    monkeypatch.setattr(LinuxLocal, "process_table", process_table)

    async def run() -> None:
        r = rig(tmp_path)
        hosts = await make_hosts(r.hosts)
        try:
            p = Prober(r, hosts, rpc_every_s=1e9, vram_every_s=1e9)
            await p.side("s01")                       # the display's beat
            assert asked and {w for _, w in asked} == {display_within_s(r.poll_s)}, asked
            for forced in ({"rpc": False}, {"rpc": True}, {"tables": await p.tables({"h0"}, 10.0)}):
                asked.clear()
                await p.side("s01", **forced)
                assert asked and {w for _, w in asked} == {0.0}, (forced, asked)
        finally:
            for h in hosts.values():
                await h.close()
    asyncio.run(run())
