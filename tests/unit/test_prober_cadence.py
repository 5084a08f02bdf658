"""The prober's adaptive cadence: the costly probes (carla RPC in the side's env, nvidia-smi) slow down
while nothing changes and return to the base cadence on any change. No subprocess here: the probe results
are hand-built, the decisions are the prober's own."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ops.model import HostConfig, RigConfig
from ops.probes import prober as prober_mod
from ops.probes.prober import Prober
from ops.probes.server import ServerProbe
from ops.probes.vram import Gpu, VramReading
from ops.tristate import Evidence, State, Verdict

# A host the prober only asks whether it is local (the probes themselves are replaced in these tests).
LOCAL = SimpleNamespace(name="local", is_local=True)


def rig() -> RigConfig:
    return RigConfig(path="/r.yaml", name="r", state_dir="/nonexistent", conda=("conda",), poll_s=1.0,
                     hosts={"local": HostConfig("local", "local")}, sides={})


def answer(pid: int, version: str | None = "0.9.16") -> ServerProbe:
    state = State.ALIVE if version else State.UNKNOWN
    return ServerProbe(Verdict(state, (), "rpc" if version else "no rpc answer"), pid, 100.0, 0, (), version)


def test_rpc_cadence_doubles_while_the_same_server_answers_and_resets_on_any_change() -> None:
    p = Prober(rig(), {}, rpc_every_s=30.0, rpc_max_s=120.0)
    seen = []
    for probe in (answer(1), answer(1), answer(1), answer(1), answer(2), answer(2), answer(2, None), answer(2)):
        p._carry_rpc("A", probe, probed=True)
        seen.append(p._rpc_every["A"])
    assert seen == [30.0, 60.0, 120.0, 120.0, 30.0, 60.0, 30.0, 30.0]
    p._carry_rpc("A", answer(2), probed=True)
    assert p._rpc_every["A"] == 60.0
    p._carry_rpc("A", answer(3, None), probed=False)   # another server between probes: base again
    assert p._rpc_every["A"] == 30.0


def reading(used: int, ok: bool = True) -> VramReading:
    return VramReading((Gpu(0, "H200", used, 143771),), {7: used}, Evidence("nvidia-smi", ok), "nvidia-smi")


def test_vram_cadence_doubles_while_unchanged_and_resets_on_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([reading(10), reading(10), reading(10), reading(10), reading(12), reading(12, ok=False)])

    async def fake_read(cfg, host, timeout):
        return next(readings)
    monkeypatch.setattr(prober_mod, "read_vram", fake_read)
    p = Prober(rig(), {"local": LOCAL}, vram_every_s=5.0, vram_max_s=30.0)   # type: ignore[dict-item]
    seen = []
    for _ in range(6):
        asyncio.run(p._read_vram("local", 1.0))
        seen.append(p._vram_every["local"])
    assert seen == [5.0, 10.0, 20.0, 30.0, 5.0, 5.0]


def test_a_served_side_probes_rpc_at_the_long_cadence_and_others_at_the_base() -> None:
    p = Prober(rig(), {}, rpc_every_s=30.0, rpc_max_s=120.0)
    assert p.rpc_served_s == 300.0
    p._served["A"] = True     # the last poll saw the evaluator ALIVE, the heartbeat FRESH, the server ALIVE
    p._served["B"] = False    # STALE, IDLE or not running: the RPC answer is the evidence, base cadence
    p._carry_rpc("A", answer(1), probed=True)
    p._carry_rpc("B", answer(2), probed=True)
    assert p.rpc_interval("A") == 300.0 and p.rpc_interval("B") == 30.0
    p._served["A"] = False    # the heartbeat went STALE: back to the side's own cadence at once
    assert p.rpc_interval("A") == 30.0


def test_a_gpu_host_whose_sides_are_all_served_is_read_at_the_longest_interval() -> None:
    from dataclasses import replace
    from types import SimpleNamespace
    on = SimpleNamespace(server=SimpleNamespace(host="local"))
    elsewhere = SimpleNamespace(server=SimpleNamespace(host="gpu2"))
    p = Prober(replace(rig(), sides={"A": on, "B": on, "C": elsewhere}), {}, vram_every_s=5.0, vram_max_s=60.0)  # type: ignore[dict-item]
    assert p.vram_interval("local") == 5.0                 # nothing known yet: the base cadence
    p._served.update(A=True, B=False, C=True)
    assert p.vram_interval("local") == 5.0                 # B is not served: its server's memory may move
    p._served["B"] = True
    assert p.vram_interval("local") == 60.0 and p.vram_interval("gpu2") == 60.0
    p._served["C"] = False                                 # C went STALE: its host is read on its cadence again
    assert p.vram_interval("gpu2") == 5.0 and p.vram_interval("local") == 60.0


def test_a_served_side_between_full_polls_reads_its_heartbeat_and_log_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI's light beat (Prober._light): within light_within_s of a full poll, a served side gets its
    heartbeat and log tail read anew and everything else as the full poll saw it; a beat that is not FRESH
    ends the light beats, and a cadence poll of a side that is not served, or any poll that asks for RPC,
    is a full one."""
    import time
    from dataclasses import replace

    from ops.probes.heartbeat import HeartbeatProbe
    from ops.tristate import Beat
    from tests.tui.fakes import rig_config, snapshot

    cfg = rig_config()
    p = Prober(cfg, {"local": LOCAL})   # type: ignore[dict-item]
    full = snapshot(cfg.sides["A"])
    beats = iter([Beat.FRESH, Beat.STALE])
    reads: list[str] = []

    async def heartbeat(host, log, stall_s, timeout, within_s=0.0):
        reads.append("heartbeat")
        return replace(full.heartbeat, beat=next(beats, Beat.FRESH), age_s=1.0)

    async def tail(host, path, n, timeout):
        reads.append("tail")
        return ["a new line"]

    async def no_full_poll(*a, **k):
        raise AssertionError("a full poll was made")
    monkeypatch.setattr(prober_mod, "probe_heartbeat", heartbeat)
    monkeypatch.setattr(prober_mod, "tail_lines", tail)
    monkeypatch.setattr(prober_mod, "probe_server", no_full_poll)
    p._served["A"] = True
    p._full["A"] = (time.monotonic(), full)
    light = asyncio.run(p.side("A", tail=3, light_within_s=2.5))
    assert reads == ["heartbeat", "tail"] and isinstance(light.heartbeat, HeartbeatProbe)
    assert light.log_tail == ("a new line",) and light.server is full.server and light.evaluator is full.evaluator
    assert light.at >= full.at and p._served["A"] is True
    asyncio.run(p.side("A", tail=3, light_within_s=2.5))      # the log went quiet: STALE
    assert p._served["A"] is False                             # so the next cadence poll is a full one

    async def tables(*a, **k):
        return {"local": LOCAL}
    monkeypatch.setattr(p, "tables", tables)
    with pytest.raises(AssertionError, match="a full poll"):   # not served (STALE above)
        asyncio.run(p.side("A", tail=3, light_within_s=2.5))
    p._served["A"] = True
    with pytest.raises(AssertionError, match="a full poll"):   # an RPC probe asked for: `g`, a plan
        asyncio.run(p.side("A", rpc=True, tail=3, light_within_s=2.5))
    with pytest.raises(AssertionError, match="a full poll"):   # a caller that does not ask for light beats
        asyncio.run(p.side("A", tail=3))
    p._full["A"] = (time.monotonic() - 10.0, full)              # the last full poll is too old
    with pytest.raises(AssertionError, match="a full poll"):
        asyncio.run(p.side("A", tail=3, light_within_s=2.5))
    p._full["A"] = (time.monotonic(), full)
    assert asyncio.run(p.side("A", tail=3, light_within_s=2.5)).server is full.server   # and back to light


def test_a_served_side_off_its_beat_is_handed_its_last_snapshot_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """beat_due=False (a rig of tens of sides reads a served side's heartbeat every few beats): no read at
    all, the very snapshot shown last (so the app skips it); a side that is not served is still read in
    full, and the next due beat reads the heartbeat again."""
    import time
    from dataclasses import replace

    from ops.tristate import Beat
    from tests.tui.fakes import rig_config, snapshot

    cfg = rig_config()
    p = Prober(cfg, {"local": LOCAL})   # type: ignore[dict-item]
    full = snapshot(cfg.sides["A"])
    reads: list[str] = []

    async def heartbeat(host, log, stall_s, timeout, within_s=0.0):
        reads.append("heartbeat")
        return replace(full.heartbeat, beat=Beat.FRESH, age_s=1.0)

    async def no_full_poll(*a, **k):
        raise AssertionError("a full poll was made")
    monkeypatch.setattr(prober_mod, "probe_heartbeat", heartbeat)
    monkeypatch.setattr(prober_mod, "probe_server", no_full_poll)
    p._served["A"] = True
    p._full["A"] = (time.monotonic(), full)
    first = asyncio.run(p.side("A", light_within_s=2.5))                # due: read
    assert reads == ["heartbeat"]
    assert asyncio.run(p.side("A", light_within_s=2.5, beat_due=False)) is first
    assert reads == ["heartbeat"]                                       # nothing read off the beat
    again = asyncio.run(p.side("A", light_within_s=2.5))
    assert reads == ["heartbeat", "heartbeat"] and again is not first

    async def tables(*a, **k):
        return {"local": LOCAL}
    monkeypatch.setattr(p, "tables", tables)
    p._served["A"] = False
    with pytest.raises(AssertionError, match="a full poll"):            # not served: read in full, due or not
        asyncio.run(p.side("A", light_within_s=2.5, beat_due=False))
