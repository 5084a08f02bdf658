"""A network namespace joined to this host by a veth pair: the WSL2-NAT topology of the field notes, and a
host of its own for `sim up --remote` (its own sshd, loopback and listeners; tests/support re-exports it).

Inside the namespace the default route goes via the host side of the veth, so `@gateway` resolves to the
host's address there, and the host's loopback is NOT reachable (the namespace has its own `lo`): an
evaluator that connects to `localhost` misses a server listening on the host, as WSL's does.

Addresses are only those of our own test namespaces: 10.213.K.0/30 (K picked free), host side .1,
namespace side .2. `ip` (iproute2) and root are required; a failure raises with the command's stderr.
Everything is removed by `close()` (the namespace, and with it the veth pair).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def available() -> str | None:
    """None when namespaces can be made here (root and iproute2), else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is missing"
    return None


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)


def _must(*args: str) -> str:
    res = _ip(*args)
    if res.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def _used_subnets() -> set[int]:
    out = _must("-4", "-o", "addr", "show")
    used = set()
    for word in out.split():
        if word.startswith("10.213."):
            try:
                used.add(int(word.split(".")[2]))
            except (IndexError, ValueError):
                pass
    return used


@dataclass
class NetNs:
    name: str
    host_if: str
    ns_if: str
    host_addr: str     # the gateway as seen from inside
    ns_addr: str

    @classmethod
    def create(cls, tag: str = "cc") -> NetNs:
        used = _used_subnets()
        start = os.getpid() % 200 + 20
        k = next((c for c in [*range(start, 250), *range(20, start)] if c not in used), None)
        if k is None:
            raise RuntimeError("no free 10.213.K.0/30 for a test namespace")
        suffix = f"{os.getpid() % 100000}{k}"
        self = cls(name=f"{tag}-{suffix}", host_if=f"{tag}h{suffix}"[:15], ns_if=f"{tag}n{suffix}"[:15],
                   host_addr=f"10.213.{k}.1", ns_addr=f"10.213.{k}.2")
        try:
            _must("netns", "add", self.name)
            _must("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _must("link", "set", self.ns_if, "netns", self.name)
            _must("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
            _must("link", "set", self.host_if, "up")
            self.exec_must("ip", "addr", "add", f"{self.ns_addr}/30", "dev", self.ns_if)
            self.exec_must("ip", "link", "set", self.ns_if, "up")
            self.exec_must("ip", "link", "set", "lo", "up")
            self.exec_must("ip", "route", "add", "default", "via", self.host_addr)
        except BaseException:
            self.close()
            raise
        return self

    def argv(self, *argv: str) -> list[str]:
        """argv run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def exec_must(self, *argv: str) -> str:
        res = subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise RuntimeError(f"in {self.name}: `{' '.join(argv)}` failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def close(self) -> None:
        """Remove the namespace (its end of the veth goes with it, and so does the host end)."""
        _ip("link", "del", self.host_if)
        _ip("netns", "del", self.name)
