"""The prober's adaptive cadence: the costly probes (carla RPC in the side's env, nvidia-smi) slow down
while nothing changes and return to the base cadence on any change. No subprocess here: the probe results
are hand-built, the decisions are the prober's own."""
from __future__ import annotations

import asyncio

import pytest

from ops.model import HostConfig, RigConfig
from ops.probes import prober as prober_mod
from ops.probes.prober import Prober
from ops.probes.server import ServerProbe
from ops.probes.vram import Gpu, VramReading
from ops.tristate import Evidence, State, Verdict


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
    p = Prober(rig(), {"local": object()}, vram_every_s=5.0, vram_max_s=30.0)   # type: ignore[dict-item]
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
