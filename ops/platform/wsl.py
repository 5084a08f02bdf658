"""The Windows side of a WSL2 machine, reached through WSL interop (`powershell.exe` run from Linux).

Every call starts a fresh powershell.exe (hundreds of ms; it sometimes hangs), so every call is bounded
twice: LocalHost kills the Linux-side interop process group at the client deadline, and the generated
script enforces its own deadline half a second later and kills the Windows process tree, because killing
the interop stub does not stop the Windows process. Prefer an ssh host to Windows for frequent polling.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ops.model import HostConfig
from ops.platform import powershell as ps
from ops.platform.base import Host, Platform, Result
from ops.platform.common import SpawnError, check_argv, check_env
from ops.platform.local import LocalHost
from ops.platform.windows import Windows

# The script's own deadline comes this much after the client's, so the client reports the timeout.
REMOTE_MARGIN_S = 0.5


class WslInteropHost(Host):
    def __init__(self, cfg: HostConfig, local: LocalHost | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.os = "windows"
        self.powershell = cfg.powershell
        self._local = local or LocalHost(name=f"{cfg.name}-interop")
        self.platform: Platform = Windows(self, self.run_powershell)
        # The Windows host as WSL2 (NAT) reaches it: the default gateway, resolved at start by make_hosts.
        # WSL's localhost is not the Windows host.
        self.address: str | None = None

    @property
    def tcp_address(self) -> str:
        # `.invalid` never resolves (RFC 6761): an unresolved gateway makes every check UNKNOWN, never a
        # check of this machine's own ports.
        return self.address or "unresolved-gateway.invalid"

    def __repr__(self) -> str:
        return f"WslInteropHost({self.name!r})"

    def argv_for(self, argv: Sequence[str], timeout: float | None, env: Mapping[str, str] | None = None,
                 cwd: str | None = None) -> list[str]:
        """The exact local argv that `run` starts (for plans and the audit log)."""
        script = ps.ps_invoke_argv(check_argv(argv), env=check_env(env), cwd=cwd,
                                   timeout_s=None if timeout is None else timeout + REMOTE_MARGIN_S)
        return ps.powershell_argv(script, self.powershell)

    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        args = check_argv(argv)
        try:
            local_argv = self.argv_for(args, timeout, env, cwd)
        except ValueError as e:
            return Result(args, None, error=f"spawn: {e}")
        return self._relabel(ps.interpret(await self._local.run(local_argv, timeout)), args)

    async def run_powershell(self, script: str, timeout: float) -> Result:
        wrapped = ps.ps_run_script(script, timeout_s=timeout + REMOTE_MARGIN_S)
        res = await self._local.run(ps.powershell_argv(wrapped, self.powershell), timeout)
        return self._relabel(ps.interpret(res), ("powershell", "<script>"))

    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None,
                             timeout: float = 15.0) -> int:
        if env:
            raise SpawnError("spawn: env is not supported for a detached Windows process")
        if log_path:
            raise SpawnError("spawn: a detached Windows process cannot redirect its output")
        try:
            script = ps.ps_spawn_detached(check_argv(argv), cwd=cwd)
        except ValueError as e:
            raise SpawnError(f"spawn: {e}") from e
        res = ps.interpret(await self._local.run(ps.powershell_argv(script, self.powershell), timeout))
        if not res.ok:
            raise SpawnError(res.why())
        text = res.stdout.strip()
        if not text.isdigit():
            raise SpawnError(f"spawn: no pid in the reply: {text[:200]!r}")
        return int(text)

    @staticmethod
    def _relabel(res: Result, argv: Sequence[str]) -> Result:
        # The Result names what the caller asked for, not the base64 blob that carried it.
        return replace(res, argv=tuple(argv))
