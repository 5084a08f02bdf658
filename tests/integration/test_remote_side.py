"""A side whose evaluator host is reached over ssh (issue 19 part 1), on the sim rig's `--remote` topology: each
host a network namespace of its own with a real OpenSSH sshd (where root allows; else an sshd on 127.0.0.1),
its own host key and known_hosts (sim/hosts.py, sim/sshd.py), the sides' servers and evaluators there. Launch starts the supervisor ON that host (`harness SIDE --as-host remote`,
setsid'd over ssh); its own recoveries there act on local identities; the console reads its state through
the ssh host; reclaim's exact targets are re-checked on that host. Dropping the ssh link (the sshd and every
session it holds killed) leaves the run going, and a console started after the link is back finds it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim import hosts as sim_hosts
from sim import rig as sim
from sim import sshd as sim_sshd
from sim.layout import SimLayout
from sim.netns import available as netns_available
from tests.support.evalops_sim import alive, checkpoint, cli, done_records, harness_state, sim_rig, wait_until

pytestmark = pytest.mark.skipif(not Path(sim_sshd.SSHD).exists(), reason=f"{sim_sshd.SSHD} missing (openssh-server)")


def status(rig_yaml: Path) -> dict:
    res = cli(rig_yaml, "status", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["sides"]


def launch(rig_yaml: Path, d: Path) -> dict:
    res = cli(rig_yaml, "launch", "A", "--yes", "--json", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    st = harness_state(d, "A")
    assert st is not None and st["status"] == "running", st
    return st


def audit_lines(d: Path, operation: str) -> list[dict]:
    lines = [json.loads(ln) for ln in (d / "state" / "audit.jsonl").read_text().splitlines() if ln.strip()]
    return [a for a in lines if a["operation"] == operation and a["outcome"] == "done"]


@pytest.mark.parametrize("netns", [False, True], ids=["sshd-on-127.0.0.1", "sshd-in-a-namespace"])
def test_launch_guided_recovery_and_reclaim_on_the_remote_host(tmp_path: Path, netns: bool) -> None:
    if netns and netns_available() is not None:
        pytest.skip(f"network namespaces: {netns_available()}")
    d = tmp_path / "sim"
    # Both topologies: the fallback (an sshd on 127.0.0.1) and a network namespace with its own sshd.
    with sim_rig(d, supervisor={"auto": False}, sides=("A",), remote=True, netns=netns, route_s=1.0, routes=40,
                 stall_s=3.0) as rig_yaml:
        address = sim_hosts.hosts(SimLayout.of(d))["remote"].address
        assert (address != "127.0.0.1") if netns else (address == "127.0.0.1"), address
        dry = cli(rig_yaml, "launch", "A", "--dry-run", "--json")
        plan = json.loads(dry.stdout)
        assert plan["refused"] is None, plan
        assert plan["harness_argv"][-4:] == ["harness", "A", "--as-host", "remote"], plan["harness_argv"]
        assert next(c for c in plan["checks"] if c["name"] == "host")["status"] == "ok", plan["checks"]

        st = launch(rig_yaml, d)
        # The supervisor runs there, told which host it is, in a session of its own (not the ssh session's).
        with open(f"/proc/{st['pid']}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[-5:-1] == [b"harness", b"A", b"--as-host", b"remote"], argv
        with open(f"/proc/{st['pid']}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        assert int(fields[3]) == st["pid"], "the supervisor is its own session leader (setsid)"
        seen = status(rig_yaml)["A"]
        assert seen["evaluator"]["state"] == "ALIVE", seen
        assert seen["supervisor"]["state"] not in (None, "UNKNOWN"), seen

        # hang → guided recovery from the console: the remote chain's exact pids (re-checked on that host by
        # its signal script), then the supervisor started there again, resuming.
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= 1, 60), "no route finished"
        sim.inject(d, "A", "hang")
        assert wait_until(lambda: status(rig_yaml)["A"]["heartbeat"]["state"] == "STALE", 60)
        res = cli(rig_yaml, "recover", "A", "--yes", "--json", timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        steps = {s["name"]: s["status"] for s in json.loads(res.stdout)["steps"]}
        assert steps["kill"] == "done" and steps["relaunch"] == "done", steps
        assert not alive(st["pid"], st["create_time"])
        stop = audit_lines(d, "stop-chain")[-1]
        assert stop["host"] == "remote" and st["pid"] in [t["pid"] for t in stop["targets"]], stop
        again = harness_state(d, "A")
        assert again is not None and again["pid"] != st["pid"] and again["status"] == "running", again

        # finish → IDLE → reclaim from the console: the server's exact pids, re-checked on the remote host.
        sim.inject(d, "A", "finish")
        assert wait_until(lambda: status(rig_yaml)["A"].get("idle") is True, 60), status(rig_yaml)
        server_pid = status(rig_yaml)["A"]["server"]["pid"]
        res = cli(rig_yaml, "reclaim", "A", "--yes")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "reclaim on side A (host remote)" in res.stderr, res.stderr
        assert wait_until(lambda: not alive(server_pid), 20)
        assert wait_until(lambda: status(rig_yaml)["A"]["server"]["state"] == "DEAD", 30), status(rig_yaml)["A"]


def test_ssh_link_dropped_mid_run_leaves_the_run_going(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    # Two hosts (two namespaces, two sshds): A on remote1, B on remote2.
    with sim_rig(d, supervisor={"auto": True, "watch_s": 1.0}, sides=("A", "B"), remote=True, hosts=2,
                 route_s=1.0, routes=60, stall_s=4.0) as rig_yaml:
        st = launch(rig_yaml, d)
        assert cli(rig_yaml, "launch", "B", "--yes", "--json", timeout=120).returncode == 0
        layout = SimLayout.of(d)
        if netns_available() is None:
            assert all(h.netns for h in sim_hosts.hosts(layout).values())
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= 1, 60), "no route finished"

        assert sim_hosts.drop(layout, "remote1") >= 1
        assert not sim_sshd.listeners(layout, "remote1")
        before = len(done_records(checkpoint(d, "A")))
        # The link is down: the console cannot see A (UNKNOWN, never DEAD); B on the other host is unaffected.
        blind = status(rig_yaml)
        assert blind["A"]["evaluator"]["state"] == "UNKNOWN", blind["A"]["evaluator"]
        assert blind["B"]["evaluator"]["state"] == "ALIVE", blind["B"]["evaluator"]
        # ... while A's supervisor and evaluator run on and finish more routes.
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= before + 2, 60)
        assert alive(st["pid"], st["create_time"])

        sim_hosts.restart(layout, "remote1")
        # A console started now rediscovers the run through the host: same supervisor, same attempt.
        seen = status(rig_yaml)["A"]
        assert seen["evaluator"]["state"] == "ALIVE", seen
        assert seen["supervisor"]["state"] != "UNKNOWN", seen
        now = harness_state(d, "A")
        assert now is not None and (now["pid"], now["attempt"]) == (st["pid"], st["attempt"])

        # hang → the supervisor on remote1 recovers by itself (its own chain, its host's local identities).
        sim.inject(d, "A", "hang")
        assert wait_until(lambda: (harness_state(d, "A") or {}).get("recoveries", 0) >= 1, 90), harness_state(d, "A")
        stop = audit_lines(d, "stop-chain")[-1]
        assert (stop["host"], stop["pid"]) == ("remote1", st["pid"]), stop
