"""The sim's remote evaluator hosts (`sim up --remote [--hosts N]`): each one a network namespace of its own
(its loopback, its listeners, its address 10.213.K.2 behind a veth pair) with a real sshd listening there on
port 22, where root allows; otherwise an sshd on 127.0.0.1 (a port of its own). Either way it is this
machine's filesystem and process table, so the rig file, state dir, logs and checkpoints have the same paths
on every host, as a lab's shared home gives them.

D/sim/hosts.json records them ({name: {netns, address, sshd_config}}): `launch_server` starts a side's
server inside its host's namespace, and `teardown` (from `sim down`, after every process is stopped)
removes the namespaces.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from sim.layout import SimLayout, read_json, write_json_atomic
from sim.netns import NetNs, available


@dataclass(frozen=True)
class SimHost:
    name: str
    address: str                 # where the console reaches it (ssh, port checks)
    netns: str | None            # the namespace its processes run in; None: this machine's own network
    config: dict                 # its rig.yaml `hosts:` entry

    def argv(self, *argv: str) -> list[str]:
        """argv run on this host (inside its namespace)."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)

    @property
    def env(self) -> dict[str, str]:
        """A sim server in a namespace listens on every address: the console reaches it from outside."""
        return {"CARLA_SIM_BIND": "0.0.0.0"} if self.netns else {}


def _path(layout: SimLayout):
    return layout.sim / "hosts.json"


def start(layout: SimLayout, names: list[str], use_netns: bool | None = None) -> dict[str, SimHost]:
    """The hosts, each with its sshd running (recorded for `sim down`). use_netns None: where root allows."""
    from sim import sshd
    auto = use_netns is None
    if use_netns is None:
        use_netns = available() is None
    made: dict[str, SimHost] = {}
    record: dict[str, dict] = {}
    for name in names:
        ns = None
        if use_netns:
            try:
                ns = NetNs.create("ccr")
            except RuntimeError:
                if not auto or made:
                    raise
                use_netns = False   # root without CAP_NET_ADMIN (a locked-down container): 127.0.0.1 hosts
        record[name] = {"netns": ns.to_json() if ns else None}
        write_json_atomic(_path(layout), record)   # before sshd: a failure below is torn down by `down`
        host = SimHost(name, ns.ns_addr if ns else "127.0.0.1", ns.name if ns else None, {})
        server = sshd.start(layout, name, host.address, host.argv(), host.env)
        made[name] = SimHost(host.name, host.address, host.netns, server.host_config(layout))
        record[name]["address"] = host.address
        write_json_atomic(_path(layout), record)
    return made


def hosts(layout: SimLayout) -> dict[str, SimHost]:
    """The recorded remote hosts (none for a local rig)."""
    out = {}
    for name, d in (read_json(_path(layout), {}) or {}).items():
        ns = d.get("netns") or None
        out[name] = SimHost(name, d.get("address") or (ns["ns_addr"] if ns else "127.0.0.1"),
                            ns["name"] if ns else None, {})
    return out


def teardown(layout: SimLayout) -> None:
    """Remove the namespaces of an earlier `--remote` rig (its processes are stopped by then)."""
    for d in (read_json(_path(layout), {}) or {}).values():
        ns = d.get("netns")
        if ns:
            with contextlib.suppress(Exception):
                NetNs(**ns).close()
    _path(layout).unlink(missing_ok=True)


def drop(layout: SimLayout, name: str) -> int:
    """Host `name`'s link goes down: its sshd and every session it holds are killed (sim/sshd.py drop)."""
    from sim import sshd
    return sshd.drop(layout, name)


def restart(layout: SimLayout, name: str) -> int:
    """Host `name`'s link comes back: its sshd again, in its namespace, same port and host key."""
    from sim import sshd
    return sshd.restart(layout, name, hosts(layout)[name].argv())
