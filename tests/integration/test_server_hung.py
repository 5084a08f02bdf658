"""The HUNG verdict on real processes (issue 15): ALIVE, HUNG, UNKNOWN and DEAD told apart, and the way
out of a hung server by hand (`restart-server`, through the guard).

The sim server's `server-hang` keeps its process and sockets (a TCP connect succeeds) and never answers a
call, like a wedged CARLA; the real `carla` client probes it from the side's pinned env.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml

from ops.config import load_config
from ops.probes.prober import Prober
from ops.rig import open_rig
from sim import rig as sim
from tests.support.evalops_sim import cli, sim_rig, wait_until

HUNG_CFG = {"hung_probes": 2, "hung_after_s": 1.0, "probe_timeout_s": 1.5}


def _edit(rig_yaml: Path, side: str = "A", **server) -> None:
    data = yaml.safe_load(rig_yaml.read_text())
    data["sides"][side]["server"].update(HUNG_CFG, **server)
    rig_yaml.write_text(yaml.safe_dump(data))


def _probes(rig_yaml: Path, n: int, side: str = "A", gap_s: float = 1.1, conda_env: str | None = None) -> list:
    """n forced rpc probes of one prober (its history is what makes HUNG), gap_s apart."""
    rig = load_config(rig_yaml)

    async def go():
        async with open_rig(rig) as live:
            prober = Prober(rig, live.hosts)
            out = []
            for i in range(n):
                if i:
                    await asyncio.sleep(gap_s)
                out.append(await prober.side(side, rpc=True))
            # A poll between rpc probes (cadence not due) keeps HUNG while process and port are up.
            out.append(await prober.side(side, rpc=False))
            return out
    return asyncio.run(go())


def _audit(d: Path) -> list[dict]:
    return [json.loads(ln) for ln in (d / "state" / "audit.jsonl").read_text().splitlines()]


def test_alive_hung_unknown_dead_told_apart(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d) as rig_yaml:
        _edit(rig_yaml)
        alive = _probes(rig_yaml, 2)
        assert [s.server.verdict.state.value for s in alive] == ["ALIVE", "ALIVE", "ALIVE"]

        sim.inject(d, "A", "server-hang")
        first, second, between = _probes(rig_yaml, 2)
        # One silent probe is not enough: UNKNOWN, with the client's own error as evidence.
        assert first.server.verdict.state.value == "UNKNOWN" and first.server.silent
        assert second.server.verdict.state.value == "HUNG", second.server.verdict
        assert any(e.what == "rpc silence" and e.ok for e in second.server.verdict.evidence)
        assert between.server.verdict.state.value == "HUNG"
        assert second.server.pid == first.server.pid and second.server.procs
        # The other side's server is untouched by any of it.
        assert _probes(rig_yaml, 1, side="B")[0].server.verdict.state.value == "ALIVE"

        # Could not measure (no carla in the probe env) is never HUNG, however many times it is tried.
        data = yaml.safe_load(rig_yaml.read_text())
        data["sides"]["A"]["evaluator"]["conda_env"] = "sim-nocarla"
        nocarla = tmp_path / "nocarla.yaml"
        nocarla.write_text(yaml.safe_dump(data))
        states = [s.server.verdict.state.value for s in _probes(nocarla, 3)]
        assert states == ["UNKNOWN"] * 4, states

        sim.inject(d, "A", "server-crash")
        # The launcher outlives its server by a moment (marker held, port refused: UNKNOWN, "starting, or
        # wedged"); then both are gone and the port refuses: DEAD.
        dead = wait_until(lambda: (v := _probes(rig_yaml, 1)[0].server.verdict).state.value == "DEAD" and v, 20)
        assert dead, _probes(rig_yaml, 1)[0].server.verdict


def test_restart_server_by_hand(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d) as rig_yaml:
        _edit(rig_yaml, adapter_candidates=[0])
        out = cli(rig_yaml, "restart-server", "A", "--yes", "--json", timeout=120)
        assert out.returncode == 3, out.stdout       # ALIVE: nothing to restart
        assert "nothing to restart" in json.loads(out.stdout)["refused"]

        before = json.loads(cli(rig_yaml, "status", "--json").stdout)["sides"]
        sim.inject(d, "A", "server-hang")
        out = cli(rig_yaml, "restart-server", "A", "--yes", "--json", timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        res = json.loads(out.stdout)
        assert res["verdict"] == "HUNG" and res["ok"], res
        roles = [t["role"] for t in res["stop"]["targets"]]
        assert roles == ["launcher", "server"] and all(t["outcome"] in ("terminated", "killed")
                                                        for t in res["stop"]["targets"])
        assert {t["pid"] for t in res["stop"]["targets"]} >= {before["A"]["server"]["pid"]}

        after = json.loads(cli(rig_yaml, "status", "--json").stdout)["sides"]
        assert after["A"]["server"]["state"] == "ALIVE" and after["A"]["server"]["pid"] != before["A"]["server"]["pid"]
        assert after["B"]["server"]["pid"] == before["B"]["server"]["pid"], "the other side's server was touched"
        ops = [(a["operation"], a["outcome"]) for a in _audit(d)]
        assert ("stop-hung-server", "done") in ops and ("adapter-poll", "done") in ops
        assert ("stop-hung-server", "refused") in ops   # the ALIVE refusal above has its line too
