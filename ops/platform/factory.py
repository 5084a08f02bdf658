"""Build the Host objects of a rig from its HostConfigs, resolving `@gateway` once at start."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ops.model import HostConfig
from ops.platform.base import Host, Platform, Result
from ops.platform.common import SpawnError, check_argv
from ops.platform.gateway import GatewayError, resolve_gateway
from ops.platform.linux_remote import LinuxRemote
from ops.platform.local import LocalHost
from ops.platform.windows import Windows
from ops.platform.wsl import WslInteropHost

GATEWAY = "@gateway"


class UnavailableHost(Host):
    """A host that could not be set up (its @gateway did not resolve): every call answers the reason,
    so every probe of it says UNKNOWN with that evidence, and nothing is ever started there."""

    def __init__(self, name: str, os_name: str, reason: str) -> None:
        self.name = name
        self.os = os_name
        self.reason = reason
        self.platform: Platform = (Windows(self, self.run_powershell) if os_name == "windows"
                                   else LinuxRemote(self))

    def __repr__(self) -> str:
        return f"UnavailableHost({self.name!r}, {self.reason!r})"

    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        return Result(check_argv(argv), None, error=f"transport: {self.reason}")

    async def run_powershell(self, script: str, timeout: float) -> Result:
        return Result(("powershell", "<script>"), None, error=f"transport: {self.reason}")

    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None, timeout: float = 15.0) -> int:
        raise SpawnError(f"spawn: {self.reason}")

    @property
    def tcp_address(self) -> str:
        return "unresolved-gateway.invalid"   # RFC 6761: never resolves, so a check is UNKNOWN


def make_host(cfg: HostConfig, address: str | None = None) -> Host:
    """One host. An ssh host whose address is '@gateway' needs `address` (see make_hosts)."""
    if cfg.type == "local":
        return LocalHost(cfg.name, cfg.os)
    if cfg.type == "ssh":
        # Imported here: asyncssh and cryptography cost ~0.3 s to import, which a rig without ssh hosts
        # (every CLI call, the demo's first frame) should not pay.
        from ops.platform.ssh import SshHost
        if cfg.address == GATEWAY and address is None:
            raise ValueError(f"host {cfg.name}: '@gateway' must be resolved first (use make_hosts)")
        return SshHost(cfg, address=address)
    if cfg.type == "wsl-interop":
        return WslInteropHost(cfg)
    raise ValueError(f"host {cfg.name}: unknown type {cfg.type!r} (local, ssh, wsl-interop)")


async def make_hosts(rig_hosts: Mapping[str, HostConfig], *, resolver=resolve_gateway) -> dict[str, Host]:
    """All hosts of a rig. `@gateway` is resolved once (never stored); when it cannot be, the hosts that
    need it become UnavailableHost with the reason, and the others start normally."""
    gateway: str | None = None
    gateway_error: str | None = None
    if any((c.type == "ssh" and c.address == GATEWAY) or c.type == "wsl-interop" for c in rig_hosts.values()):
        try:
            gateway = await resolver()
        except GatewayError as e:
            gateway_error = str(e)
    out: dict[str, Host] = {}
    for name, cfg in rig_hosts.items():
        if cfg.type == "ssh" and cfg.address == GATEWAY:
            out[name] = (UnavailableHost(cfg.name, cfg.os, gateway_error or 'gateway unresolved') if gateway is None
                         else make_host(cfg, address=gateway))
        else:
            out[name] = make_host(cfg)
            if isinstance(out[name], WslInteropHost):
                out[name].address = gateway   # type: ignore[attr-defined]
    return out
