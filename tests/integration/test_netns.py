"""The field notes' topology, for real: the evaluator (and the console) in a network namespace whose
default gateway is the host where the CARLA server listens (tests/support/netns.py), the server's host an
ssh host at `@gateway` (a real sshd on the gateway address).

Inside the namespace `localhost` is the namespace's own loopback, as WSL2's localhost is not the Windows
host: the evaluator reaches the server only if the console passes `--host <gateway>`, and the console's
own port checks must go to that address too (Host.tcp_address), not to 127.0.0.1.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.evalops_sim import REPO, checkpoint, harness_state, sim_rig, wait_until
from tests.support.netns import NetNs
from tests.support.sshd import Sshd


def _in_ns(ns: NetNs, rig_yaml: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(ns.argv(sys.executable, "-m", "console", "-c", str(rig_yaml), *args), cwd=REPO,
                          capture_output=True, text=True, timeout=90)


@pytest.fixture
def netns():
    ns = NetNs.create("cc14")
    try:
        yield ns
    finally:
        ns.close()


def test_host_is_the_gateway_and_port_checks_go_there(tmp_path: Path, netns: NetNs,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert netns.exec_must("ip", "route", "show").startswith(f"default via {netns.host_addr}")
    sshd = Sshd.create(tmp_path / "sshd", listen=netns.host_addr)
    sshd.start()
    monkeypatch.setenv("CARLA_SIM_BIND", "0.0.0.0")   # a real CARLA server listens on every interface
    d = tmp_path / "sim"
    try:
        with sim_rig(d, sides=("A",)) as rig_yaml:
            cfg = yaml.safe_load(rig_yaml.read_text())
            local = cfg["hosts"]["local"]
            cfg["hosts"]["win"] = {"type": "ssh", "os": "linux", "address": "@gateway", "port": sshd.port,
                                   "user": sshd.user,
                                   "known_hosts": str(sshd.write_known_hosts(tmp_path / "known_hosts")),
                                   "client_keys": [str(sshd.client_key)], "nvidia_smi": local["nvidia_smi"],
                                   "netsh": local["netsh"], "vram_source": "nvidia-smi"}
            cfg["sides"]["A"]["server"]["host"] = "win"
            rig_yaml.write_text(yaml.safe_dump(cfg, sort_keys=False))
            port = cfg["sides"]["A"]["server"]["rpc_port"]

            dry = _in_ns(netns, rig_yaml, "launch", "A", "--dry-run", "--json")
            out = json.loads(dry.stdout)
            assert dry.returncode == 0, dry.stdout + dry.stderr
            argv = out["argv"]
            assert argv[argv.index("--host") + 1] == netns.host_addr and argv[argv.index("--port") + 1] == str(port)

            st = json.loads(_in_ns(netns, rig_yaml, "status", "--json").stdout)["sides"]["A"]["server"]
            assert st["state"] == "ALIVE", st
            assert f"tcp connect {netns.host_addr}:{port}" in json.dumps(st["evidence"]), st["evidence"]

            res = _in_ns(netns, rig_yaml, "launch", "A", "--yes", "--json")
            assert res.returncode == 0, res.stdout + res.stderr
            assert wait_until(lambda: (c := checkpoint(d, "A")) and c["_checkpoint"]["records"], 30), \
                (d / "work" / "A" / "logs" / "eval.log").read_text()[-2000:]
            log = (d / "work" / "A" / "logs" / "eval.log").read_text()
            assert f"at {netns.host_addr}:{port}" in log
            assert harness_state(d, "A")["status"] == "running"
    finally:
        sshd.cleanup()
