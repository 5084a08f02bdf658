"""`status` against the sim rig: ALIVE / DEAD / UNKNOWN with evidence, heartbeat, progress, idle.

Real processes throughout: the fake servers answer the real carla client, the probe runs in the pinned
(fake) conda env from a script file, and the failures are real failing commands, not mocked answers.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ops.config import load_config
from ops.parse.nvsmi import QUERY_XML_ARGS
from ops.platform.linux_remote import LinuxRemote
from ops.platform.local import LocalHost
from ops.probes.prober import Prober
from ops.rig import open_rig
from sim import rig as sim
from tests.support.evalops_sim import wait_until

CLI = [sys.executable, "-m", "console"]


@pytest.fixture
def rig_dir(tmp_path: Path):
    d = tmp_path / "rig"
    # Enough routes that no side finishes on its own during a test on a loaded machine: a finished side's
    # heartbeat is OFF, not FRESH (issue 23), and B must still be running when A hangs.
    sim.up(d, route_s=1.0, tick_s=0.2, stall_s=2.0, routes=60)
    try:
        # up() returns once the servers answer; the evaluators are started, not yet running (conda run's
        # wrapper, then the interpreter), and each server books its VRAM a moment after it starts: a status
        # at once on a loaded machine can see no evaluator, or a server on no GPU, yet.
        assert wait_until(lambda: all(s["evaluator"]["state"] == "ALIVE" and s["heartbeat"]["state"] == "FRESH"
                                      and s["vram"]["server_mb"] for s in status_json(d / "rig.yaml").values()),
                          90, every=0.2), "the sim's evaluators never ran, or its servers never booked their VRAM"
        yield d
    finally:
        sim.down(d)


def status_json(cfg: Path, *extra: str) -> dict:
    out = subprocess.run([*CLI, "-c", str(cfg), "status", "--json", *extra], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["sides"]


def test_sim_rig_alive_fresh_progress_then_hang_and_finish(rig_dir: Path) -> None:
    cfg = rig_dir / "rig.yaml"
    first = status_json(cfg)
    for name in ("A", "B"):
        s = first[name]
        assert s["server"]["state"] == "ALIVE", s["server"]
        assert s["server"]["version"] == "0.9.15"
        assert s["heartbeat"]["state"] == "FRESH"
        assert s["evaluator"]["state"] == "ALIVE" and s["idle"] is False
        assert s["vram"]["used_mb"] is not None and s["vram"]["server_mb"] == 6000
        assert set(s["server"]["ports"]) == {"rpc", "streaming", "secondary", "tm"}
    # Progress moves (a route a second): wait for it, rather than for a time it would take on an idle
    # machine. A checkpoint caught mid-rewrite reads as null progress: that poll simply does not count.
    start = (first["A"]["evaluator"]["progress"] or [0])[0]

    def moved() -> dict | None:
        snap = status_json(cfg)
        prog = snap["A"]["evaluator"]["progress"]
        return snap if prog is not None and prog[0] > start else None
    later = wait_until(moved, 60, every=0.5)
    assert later, "side A's progress never moved"

    a_pids = [m["pid"] for m in later["A"]["evaluator"]["chain"]]
    sim.inject(rig_dir, "A", "hang")
    # STALE after stall_s (2 s) plus one poll; the deadline is only a backstop (a loaded machine is slow).
    deadline = time.monotonic() + 60
    while True:
        snap = status_json(cfg, "--no-rpc")
        if snap["A"]["heartbeat"]["state"] == "STALE" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert snap["A"]["heartbeat"]["state"] == "STALE", snap["A"]["heartbeat"]
    assert snap["B"]["heartbeat"]["state"] == "FRESH"
    assert all(psutil.pid_exists(p) for p in a_pids), "a hung evaluator stays alive"
    assert snap["A"]["evaluator"]["state"] == "ALIVE"

    sim.inject(rig_dir, "B", "finish")
    deadline = time.monotonic() + 60
    while True:
        snap = status_json(cfg)   # idle needs the server ALIVE, i.e. a real RPC answer
        if snap["B"]["idle"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert snap["B"]["idle"] is True, snap["B"]
    assert snap["B"]["evaluator"]["phase"] == "finished"
    assert snap["A"]["idle"] is False


def _probe(cfg_path: Path, side: str = "A", hosts: dict | None = None, **prober_kw):
    rig = load_config(cfg_path)

    async def go():
        async with open_rig(rig) as live:
            prober = Prober(rig, hosts or live.hosts, **prober_kw)
            return await prober.side(side, rpc=True)
    return asyncio.run(go())


def test_server_dead_after_sim_down(tmp_path: Path) -> None:
    d = tmp_path / "rig"
    sim.up(d, start_evaluators=False)
    sim.down(d)
    snap = _probe(d / "rig.yaml")
    assert snap.server.verdict.state.value == "DEAD", snap.server.verdict
    assert "refused" in snap.server.verdict.summary


def _rewrite(cfg: Path, edit) -> Path:
    data = yaml.safe_load(cfg.read_text())
    edit(data)
    out = cfg.with_name("edited.yaml")
    out.write_text(yaml.safe_dump(data))
    return out


def test_unknown_not_dead_when_probe_env_lacks_carla(rig_dir: Path) -> None:
    def to_nocarla(d):
        d["sides"]["A"]["evaluator"]["conda_env"] = "sim-nocarla"
    snap = _probe(_rewrite(rig_dir / "rig.yaml", to_nocarla))
    v = snap.server.verdict
    assert v.state.value == "UNKNOWN", v
    assert "carla" in v.summary and "import" in " ".join(e.line() for e in v.evidence)


def test_unknown_not_dead_when_host_command_times_out(rig_dir: Path) -> None:
    (rig_dir / "sim" / "conda.mode").write_text("hang")
    try:
        t0 = time.monotonic()
        snap = _probe(rig_dir / "rig.yaml", rpc_overhead_s=1.0)
        took = time.monotonic() - t0
    finally:
        (rig_dir / "sim" / "conda.mode").unlink()
    v = snap.server.verdict
    assert v.state.value == "UNKNOWN" and "timeout" in " ".join(e.line() for e in v.evidence), v
    assert took < 15


class _NoProcTable(LocalHost):
    """A real host whose process-table command fails the way a broken remote does (exit 2, stderr)."""

    is_local = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.platform = LinuxRemote(self)

    async def script_path(self, name: str) -> str:
        return "/nonexistent/carla-console/proctable.py" if name == "proctable.py" else await super().script_path(name)


def test_unknown_not_dead_when_process_table_cannot_be_read(rig_dir: Path) -> None:
    rig = load_config(rig_dir / "rig.yaml")
    snap = _probe(rig_dir / "rig.yaml", hosts={"local": _NoProcTable("local")})
    v = snap.server.verdict
    assert v.state.value == "UNKNOWN", v
    assert "process table" in v.summary and "proctable.py" in v.summary
    assert snap.evaluator.verdict.state.value == "UNKNOWN"
    assert rig.sides["A"]


def test_status_table_is_aligned_words(rig_dir: Path) -> None:
    out = subprocess.run([*CLI, "-c", str(rig_dir / "rig.yaml"), "status"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # The lifecycle word leads (issue 23): a side's run state before its processes' measurements.
    assert lines[0].split()[:4] == ["SIDE", "LIFECYCLE", "SERVER", "PID"]
    assert lines[1].startswith("A ") and lines[1].split()[1] == "RUNNING"
    assert "ALIVE" in lines[1] and "FRESH" in lines[1]
    # aligned: every row's SERVER column starts at the same offset
    col = lines[0].index("SERVER")
    assert all(ln[col:].split()[0] in ("ALIVE", "DEAD", "UNKNOWN") for ln in lines[1:3])


def _via_ssh(cfg: Path, ssh_cfg, known_hosts: str | None = None) -> Path:
    def edit(d):
        d["hosts"]["far"] = {"type": "ssh", "os": "linux", "address": "127.0.0.1", "port": ssh_cfg.port,
                             "user": ssh_cfg.user, "known_hosts": known_hosts or ssh_cfg.known_hosts,
                             "client_keys": list(ssh_cfg.client_keys), "connect_timeout_s": 5,
                             "nvidia_smi": d["hosts"]["local"]["nvidia_smi"]}
        for side in d["sides"].values():
            side["server"]["host"] = "far"
            side["evaluator"]["host"] = "far"
    return _rewrite(cfg, edit)


def test_status_through_a_real_sshd(rig_dir: Path, ssh_cfg) -> None:
    cfg = _via_ssh(rig_dir / "rig.yaml", ssh_cfg)
    # A checkpoint caught mid-rewrite reads as null progress, and one probe can land between two ticks of a
    # beat: read again until both sides show progress and a FRESH beat, with a deadline.
    sides = wait_until(lambda: (s := status_json(cfg)) and all(
        s[n]["evaluator"]["progress"] is not None and s[n]["heartbeat"]["state"] == "FRESH" for n in ("A", "B"))
        and s, 60, every=0.5) or status_json(cfg)
    for name in ("A", "B"):
        s = sides[name]
        assert s["server"]["state"] == "ALIVE", s["server"]
        assert s["server"]["host"] == "far"
        assert s["heartbeat"]["state"] == "FRESH", s["heartbeat"]
        assert s["evaluator"]["state"] == "ALIVE" and s["evaluator"]["progress"] is not None
        assert s["vram"]["server_mb"] == 6000


def test_wrong_host_key_is_refused_with_instructions(rig_dir: Path, ssh_cfg, sshd, tmp_path: Path) -> None:
    from tests.support.sshd import keygen
    other = keygen(tmp_path / "other_host_key", "impostor")
    wrong = sshd.write_known_hosts(tmp_path / "known_hosts_wrong", pub=other)
    sides = status_json(_via_ssh(rig_dir / "rig.yaml", ssh_cfg, known_hosts=str(wrong)))
    s = sides["A"]["server"]
    assert s["state"] == "UNKNOWN"
    text = " ".join(s["evidence"]) + s["summary"]
    assert str(wrong) in text and "ssh-keyscan" in text, text


class _CountingHost(LocalHost):
    """The real local host, counting the nvidia-smi GPU readings (`-q -x`) it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.gpu_queries = 0

    async def run(self, argv, timeout, **kw):
        if tuple(argv[-2:]) == QUERY_XML_ARGS:
            self.gpu_queries += 1
        return await super().run(argv, timeout, **kw)


def test_sides_on_one_gpu_host_share_one_vram_read(rig_dir: Path) -> None:
    rig = load_config(rig_dir / "rig.yaml")
    host = _CountingHost()

    async def go():
        async with open_rig(rig) as live:
            hosts = {name: host for name in live.hosts}
            prober = Prober(rig, hosts, vram_every_s=0.0)
            first = await asyncio.gather(*(prober.side(s, rpc=False) for s in rig.sides))
            after_one_beat = host.gpu_queries
            await asyncio.gather(*(prober.side(s, rpc=False) for s in rig.sides))
            return first, after_one_beat, host.gpu_queries

    first, after_one_beat, after_two = asyncio.run(go())
    assert all(s.vram is not None and s.vram.ok for s in first), [s.vram for s in first]
    assert first[0].vram is first[1].vram          # the same reading, not two of the same GPU
    assert (after_one_beat, after_two) == (1, 2)   # one read per beat, and a new one on the next beat


def test_cadence_polls_of_one_beat_share_a_scan_and_checks_scan_fresh(rig_dir: Path, monkeypatch) -> None:
    from ops.platform.procs import LocalProcScanner
    scans: list[float] = []
    real_scan = LocalProcScanner.scan

    def counting_scan(self, fresh_pids=frozenset()):
        scans.append(time.monotonic())
        return real_scan(self, fresh_pids)
    monkeypatch.setattr(LocalProcScanner, "scan", counting_scan)
    rig = load_config(rig_dir / "rig.yaml")

    async def go():
        async with open_rig(rig) as live:
            prober = Prober(rig, live.hosts)
            await asyncio.gather(*(prober.side(s) for s in rig.sides))          # one beat: one scan
            beat = len(scans)
            await prober.side("A", rpc=True)                                      # `g` / a plan: fresh
            checked = len(scans)
            # The next beat: past BEAT_SHARE_S and in the next whole period of poll_s, as the app wakes it.
            beat_of = int(time.monotonic() // rig.poll_s)
            while int(time.monotonic() // rig.poll_s) == beat_of or time.monotonic() - scans[-1] < 0.3:
                await asyncio.sleep(0.02)
            await asyncio.gather(*(prober.side(s) for s in rig.sides))          # the next beat scans again
            return beat, checked, len(scans)

    assert asyncio.run(go()) == (1, 2, 3)
