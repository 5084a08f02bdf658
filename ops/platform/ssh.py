"""A host reached over SSH (asyncssh): one pooled connection, verified host keys, bounded commands.

Connection: opened lazily on first use, shared by every caller (concurrent callers await one connect
attempt), dropped after a transport failure and reopened by the next call. A failed connect is
remembered for `retry_s`, so a dead host at 1 Hz polling costs one attempt per `retry_s`, not one per
probe. At most `max_sessions` channels are open at once (OpenSSH's MaxSessions is 10; the 11th channel
open fails): further callers queue on a semaphore.

Host keys: always checked against the configured known_hosts file (default ~/.ssh/known_hosts); an
unknown or changed key is refused with the command that adds it. asyncssh treats known_hosts=None as
"accept anything", so a missing file is refused here before asyncssh sees it. ~/.ssh/config is NOT read:
the rig file is the one source of truth for how a host is reached.

Remote commands (POSIX): one string built with shlex quoting only (`cd -- DIR || ...; exec timeout -k 2
T env -- K=V argv...`). The command runs with no pty (a pty would merge stderr into stdout), so a
client-side timeout alone would leave it running: `timeout` bounds it on the remote side, half a second
after the client's own deadline (then KILL 2 s later). On a client timeout we also send TERM over the
channel: sshd delivers it with killpg to the session and `timeout` (exec'd, so it is the session
leader) forwards it to the command's group - but OpenSSH refuses signal requests for root logins
("session signalling requires privilege separation", seen with 9.2), so the remote `timeout` is the
part that must work, and does, within T + 0.5 s (+ 2 s for a command that ignores TERM). The remote
`timeout` needs GNU coreutils (or a busybox with -k). env entries are added to the remote environment
with `env` (sshd's AcceptEnv refuses most names). The remote login shell must be POSIX-compatible.

Windows (os: windows): the command is `powershell.exe -NoProfile -NonInteractive -EncodedCommand B64`,
which cmd.exe and PowerShell both pass through unchanged; the script enforces its own deadline and
kills the process tree (see ops/platform/powershell.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import asyncssh

from ops.model import HostConfig
from ops.platform import powershell as ps
from ops.platform.base import SCRIPTS_DIR, Host, Platform, Result, ScriptUnavailable
from ops.platform.common import (
    MAX_OUTPUT,
    SpawnError,
    check_argv,
    check_env,
    decode,
    read_capped,
    settled,
    timeout_error,
)
from ops.platform.linux_remote import LinuxRemote
from ops.platform.remote_agent import AgentError, AgentStream, RemoteAgent
from ops.platform.windows import Windows

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# How much later than the client's deadline the remote side stops the command itself: the client
# times out first and reports it; the remote bound is the backstop when the TERM cannot be delivered.
REMOTE_MARGIN_S = 0.5
REMOTE_KILL_AFTER_S = 2
# AES-GCM first (then asyncssh's defaults): as strong as chacha20-poly1305, and asyncssh seals a GCM
# packet in one call where chacha20 takes five cipher contexts; a poll of tens of sides sends hundreds.
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                   "aes256-ctr", "aes192-ctr", "aes128-ctr"]
# The agent (ops/scripts/agent.py): how long its start may take, and how long after a failed start the
# host answers with its commands alone before it tries again (a host without python3 stays on them).
AGENT_START_S = 15.0
AGENT_RETRY_S = 60.0

# `timeout` and `env` report a missing/unexecutable program as 127/126 with these messages.
_SPAWN_FAIL = re.compile(r"^(timeout: failed to run command |env: )")


class TransportError(Exception):
    """The connection could not be used; the message is what goes after 'transport: '."""


def known_hosts_hint(host: str, port: int, path: str) -> str:
    target = f"-p {port} {host}" if port != 22 else host
    return (f"verify the fingerprint out of band, then add it: "
            f"ssh-keyscan {target} >> {shlex.quote(path)}")


def _home_path(path: str) -> str:
    """A remote path for the shell: '~' and '~/x' expand to the remote $HOME, everything else quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def posix_command(argv: Sequence[str], timeout: float | None, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> str:
    """The remote shell command for argv: every element quoted, bounded by `timeout` (+ margin)."""
    args = list(check_argv(argv))
    extra = check_env(env)
    cmd: list[str] = []
    if timeout is not None:
        cmd += ["timeout", "-k", str(REMOTE_KILL_AFTER_S), f"{timeout + REMOTE_MARGIN_S:g}"]
    if extra:
        cmd += ["env", "--", *(f"{k}={v}" for k, v in extra.items())]
    cmd += args
    text = "exec " + shlex.join(cmd)
    if cwd is not None:
        msg = shlex.quote(f"{ps.SPAWN_MARKER}cannot cd to {cwd}")
        text = (f"cd -- {_home_path(cwd)} || {{ printf '%s\\n' {msg} >&2; exit {ps.SPAWN_RC}; }}; "
                + text)
    return text


def posix_spawn_command(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None,
                        log_path: str | None = None) -> str:
    """Start argv detached (own session via setsid, stdin /dev/null, output appended to log_path) and
    print its pid. A background job of a non-interactive shell is not a group leader, so setsid does
    not fork again and `$!` is the pid of the program itself."""
    args = list(check_argv(argv))
    extra = check_env(env)
    cmd = ["setsid"] + (["env", "--", *(f"{k}={v}" for k, v in extra.items())] if extra else []) + args
    out = _home_path(log_path) if log_path else "/dev/null"
    text = f"{shlex.join(cmd)} </dev/null >>{out} 2>&1 & echo $!"
    if cwd is not None:
        msg = shlex.quote(f"{ps.SPAWN_MARKER}cannot cd to {cwd}")
        text = f"cd -- {_home_path(cwd)} || {{ printf '%s\\n' {msg} >&2; exit {ps.SPAWN_RC}; }}; " + text
    return text


OPEN_RETRY_S = (0.05, 0.1, 0.2, 0.4)   # waits between refused session opens, before giving up


class SshHost(Host):
    def __init__(self, cfg: HostConfig, address: str | None = None, *, max_sessions: int = 8,
                 retry_s: float = 1.0, keepalive_s: float = 10.0, max_output: int = MAX_OUTPUT) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.os = cfg.os
        self.address = address or cfg.address
        if not self.address or self.address.startswith("@"):
            raise ValueError(f"host {cfg.name}: address {cfg.address!r} must be resolved before use")
        self.port = cfg.port
        self.known_hosts = os.path.expanduser(cfg.known_hosts or DEFAULT_KNOWN_HOSTS)
        self.max_sessions = max_sessions
        self.retry_s = retry_s
        self.keepalive_s = keepalive_s
        self.max_output = max_output
        self.platform: Platform = (Windows(self, self.run_powershell) if self.os == "windows"
                                   else LinuxRemote(self))
        self.connect_count = 0          # connections opened so far (tests and the UI's host panel)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connecting: asyncio.Future[asyncssh.SSHClientConnection] | None = None
        self._failed: tuple[float, str] | None = None  # (monotonic time, error) of the last failed connect
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scripts: dict[str, str] = {}   # packaged script name -> its path on the remote host
        self._upload_lock: asyncio.Lock | None = None
        self._agent: RemoteAgent | None = None
        self._agent_start: asyncio.Future[RemoteAgent] | None = None
        self._agent_failed: tuple[float, str] | None = None   # (monotonic time, reason) of the last failed start
        self.agent_starts = 0           # agents started so far (tests and the benchmark)

    @property
    def tcp_address(self) -> str:
        """The address this host is reached by (an `@gateway` already resolved): its ports are checked there."""
        return self.address or "unresolved-gateway.invalid"

    def __repr__(self) -> str:
        return f"SshHost({self.name!r}, {self.target})"

    @property
    def target(self) -> str:
        user = f"{self.cfg.user}@" if self.cfg.user else ""
        return f"{user}{self.address}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.target})"

    # -- connection pool -------------------------------------------------------------------------

    async def _open(self) -> asyncssh.SSHClientConnection:
        if not os.path.isfile(self.known_hosts):
            raise TransportError(f"known_hosts file {self.known_hosts} does not exist; the host key for "
                                 f"{self.address}:{self.port} cannot be verified; "
                                 + known_hosts_hint(self.address or '', self.port, self.known_hosts))
        try:
            conn = await asyncssh.connect(
                self.address, self.port, username=self.cfg.user or (), known_hosts=self.known_hosts,
                client_keys=[os.path.expanduser(k) for k in self.cfg.client_keys] or (),
                config=None, connect_timeout=self.cfg.connect_timeout_s, encryption_algs=ENCRYPTION_ALGS,
                keepalive_interval=self.keepalive_s, keepalive_count_max=3,
                # Never prompt: the console has no terminal to offer a password prompt on.
                password=None, kbdint_auth=False)
        except asyncssh.HostKeyNotVerifiable as e:
            raise TransportError(f"host key for {self.address}:{self.port} is not in {self.known_hosts} "
                                 f"(or changed): {e}; "
                                 + known_hosts_hint(self.address or '', self.port, self.known_hosts)) from e
        except asyncssh.PermissionDenied as e:
            raise TransportError(f"authentication failed for {self.target}: {e}") from e
        except asyncio.TimeoutError as e:
            raise TransportError(f"connect to {self.target} timed out after "
                                 f"{self.cfg.connect_timeout_s} s") from e
        except (OSError, asyncssh.Error) as e:
            raise TransportError(f"connect to {self.target}: {type(e).__name__}: {e}") from e
        self.connect_count += 1
        return conn

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        try:
            conn = await self._open()
        except TransportError as e:
            self._failed = (time.monotonic(), str(e))
            raise
        self._failed = None
        self._conn = conn
        return conn

    async def _connection(self) -> asyncssh.SSHClientConnection:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        self._conn = None
        if self._failed is not None and time.monotonic() - self._failed[0] < self.retry_s:
            raise TransportError(f"{self._failed[1]} (retrying after {self.retry_s} s)")
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect_once())
            # Retrieve the exception even if every waiter gave up (timeout), so asyncio does not warn.
            self._connecting.add_done_callback(lambda f: f.cancelled() or f.exception())
        # shield: a caller whose own timeout expires must not cancel the attempt the others share.
        return await asyncio.shield(self._connecting)

    def _bind_loop(self) -> None:
        """A connection, a semaphore and a shared connect task all belong to one event loop. A host
        reused from another loop (a CLI that calls asyncio.run twice) starts afresh rather than
        failing with "attached to a different loop"; the old connection died with its loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._conn = None
            self._connecting = None
            self._sem = asyncio.Semaphore(self.max_sessions)
            self._upload_lock = asyncio.Lock()
            self._agent = None
            self._agent_start = None

    async def script_path(self, name: str, timeout: float = 15.0) -> str:
        """Copy ops/scripts/NAME to ~/.cache/carla-console/scripts/<sha>/NAME once (SFTP), return its path.

        Scripts run from files on the host, never from stdin; the content hash in the path means a
        console of another version never runs a stale copy."""
        if self.os != "linux":
            raise ScriptUnavailable(f"host {self.name}: packaged scripts run on Linux hosts only")
        cached = self._scripts.get(name)
        if cached is not None:
            return cached
        self._bind_loop()
        assert self._upload_lock is not None
        async with self._upload_lock:   # probes of several sides ask at once: copy once
            cached = self._scripts.get(name)
            if cached is not None:
                return cached
            return await self._script_path(name, timeout)

    async def _script_path(self, name: str, timeout: float) -> str:
        data = (SCRIPTS_DIR / name).read_bytes()
        digest = hashlib.sha256(data).hexdigest()[:16]
        try:
            path = await asyncio.wait_for(self._upload(name, data, digest), timeout)
        except asyncio.TimeoutError as e:
            raise ScriptUnavailable(f"copy {name} to {self.target}: timeout after {timeout} s") from e
        except (TransportError, OSError, asyncssh.Error) as e:
            raise ScriptUnavailable(f"copy {name} to {self.target}: {type(e).__name__}: {e}") from e
        self._scripts[name] = path
        return path

    async def _upload(self, name: str, data: bytes, digest: str) -> str:
        conn = await self._connection()
        async with conn.start_sftp_client() as sftp:
            home = await sftp.realpath(".")
            folder = f"{home}/.cache/carla-console/scripts/{digest}"
            path = f"{folder}/{name}"
            if not await sftp.exists(path):
                await sftp.makedirs(folder, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                async with sftp.open(tmp, "wb") as f:
                    await f.write(data)
                await sftp.posix_rename(tmp, path)
        return path

    # -- the agent -------------------------------------------------------------------------------

    def running_agent(self) -> RemoteAgent | None:
        """The agent when one is running and usable now (no waiting)."""
        agent = self._agent
        if agent is None or not agent.usable or self._loop is not asyncio.get_running_loop():
            return None
        return agent

    async def agent(self, timeout: float) -> RemoteAgent | None:
        """The host's agent, started on first use over one exec channel; None when it is not running
        and could not be started within timeout: the caller uses the commands (the same answers, each a
        remote exec). One start is shared by concurrent callers and goes on past a caller's timeout."""
        if self.os != "linux":
            return None
        self._bind_loop()
        agent = self._agent
        if agent is not None and agent.usable:
            return agent
        self._agent = None
        if self._agent_failed is not None and time.monotonic() - self._agent_failed[0] < AGENT_RETRY_S:
            return None
        if self._agent_start is None or self._agent_start.done():
            self._agent_start = asyncio.ensure_future(self._start_agent())
            self._agent_start.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            return await asyncio.wait_for(asyncio.shield(self._agent_start), timeout)
        except (asyncio.TimeoutError, AgentError, TransportError):
            return None

    @property
    def agent_error(self) -> str | None:
        """Why the host answers with its commands now (the last failed agent start), if it does."""
        return self._agent_failed[1] if self._agent_failed is not None else None

    async def _start_agent(self) -> RemoteAgent:
        try:
            return await asyncio.wait_for(self._launch_agent(), AGENT_START_S)
        except TransportError:
            raise   # the connection's own retry applies; the agent starts once it is back
        except asyncio.TimeoutError:
            why = f"agent on {self.name}: not started within {AGENT_START_S} s"
        except AgentError as e:
            why = str(e)
        except (ScriptUnavailable, OSError, asyncssh.Error) as e:
            why = f"agent on {self.name}: {type(e).__name__}: {e}"
        self._agent_failed = (time.monotonic(), why)
        raise AgentError(why)

    async def _launch_agent(self) -> RemoteAgent:
        path = await self.script_path("agent.py")
        conn = await self._connection()
        try:
            # No remote `timeout`: the agent lives as long as its channel and ends on EOF when it closes.
            proc = await conn.create_process(posix_command(["python3", path], None), encoding=None)
        except asyncssh.ChannelOpenError as e:
            raise TransportError(f"channel open failed on {self.target}: {e}") from e
        agent = RemoteAgent(AgentStream(proc.stdin.write, proc.stdout.readexactly, proc.stderr.read, proc.close),
                            f"agent on {self.name}")
        try:
            await agent.hello(AGENT_START_S)
        except BaseException:
            agent.close("its start failed")
            raise
        self._agent, self._agent_failed = agent, None
        self.agent_starts += 1
        return agent

    def _drop(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.close()

    async def close(self) -> None:
        if self._loop is not asyncio.get_running_loop():
            # Opened in a loop that is gone: its sockets went with it; nothing to close from here.
            self._conn, self._connecting, self._loop = None, None, None
            self._agent, self._agent_start = None, None
            return
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._agent_start is not None and not self._agent_start.done():
            self._agent_start.cancel()
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 2.0)

    # -- commands --------------------------------------------------------------------------------

    def command_for(self, argv: Sequence[str], timeout: float | None, env: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> str:
        """The exact remote command string `run` sends (shown to the operator in plans and audit)."""
        if self.os == "windows":
            script = ps.ps_invoke_argv(check_argv(argv), env=check_env(env), cwd=cwd,
                                       timeout_s=None if timeout is None else timeout + REMOTE_MARGIN_S)
            return self._ps_command(script)
        return posix_command(argv, timeout, env, cwd)

    def _ps_command(self, script: str) -> str:
        return ps.windows_cmdline(ps.powershell_argv(script, self.cfg.powershell))

    async def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> Result:
        args = check_argv(argv)
        try:
            command = self.command_for(args, timeout, env, cwd)
        except ValueError as e:
            return Result(args, None, error=f"spawn: {e}")
        res = await self.run_command(command, timeout, argv=args)
        return ps.interpret(res) if self.os == "windows" else _interpret_posix(res)

    async def run_powershell(self, script: str, timeout: float) -> Result:
        """Windows only: run a PowerShell script (cmdlets), bounded on the remote side as well."""
        if self.os != "windows":
            raise ValueError(f"host {self.name} is not a Windows host")
        wrapped = ps.ps_run_script(script, timeout_s=timeout + REMOTE_MARGIN_S)
        res = await self.run_command(self._ps_command(wrapped), timeout, argv=("powershell", "<script>"))
        return ps.interpret(res)

    async def run_command(self, command: str, timeout: float, argv: tuple[str, ...] | None = None) -> Result:
        """Send one already-quoted command string. Never raises for transport or timeout."""
        t0 = time.monotonic()
        rargv = argv or ("ssh", self.name, command)
        self._bind_loop()
        try:
            return await asyncio.wait_for(self._run_command(command, rargv, t0), timeout)
        except asyncio.TimeoutError:
            return Result(rargv, None, took_s=time.monotonic() - t0, error=timeout_error(timeout),
                          timed_out=True)
        except TransportError as e:
            return Result(rargv, None, took_s=time.monotonic() - t0, error=f"transport: {e}")

    async def _open_session(self, conn: asyncssh.SSHClientConnection, command: str) -> asyncssh.SSHClientProcess:
        """A session channel running command. A refused open is tried again a few times: sshd counts a
        session until its own clean-up of it has run, which lags the client's view on a loaded host (a
        loaded run saw the 12th of 12 commands refused with 8 open at most). The command has not started
        when the open is refused, so trying again never runs it twice; the caller's deadline bounds it."""
        for delay in (*OPEN_RETRY_S, None):
            try:
                return await conn.create_process(command, stdin=asyncssh.DEVNULL, encoding=None)
            except asyncssh.ChannelOpenError as e:
                if delay is None:   # past the server's MaxSessions, or the server is going away: the connection stays
                    raise TransportError(f"channel open failed on {self.target}: {e}") from e
                await asyncio.sleep(delay)
            except (OSError, asyncssh.Error) as e:
                self._drop(conn)
                raise TransportError(f"{self.target}: {type(e).__name__}: {e}") from e
        raise AssertionError("unreachable")

    async def _run_command(self, command: str, rargv: tuple[str, ...], t0: float) -> Result:
        assert self._sem is not None
        async with self._sem:
            conn = await self._connection()
            proc = await self._open_session(conn, command)
            try:
                (out, odrop), (err, edrop) = await settled(asyncio.gather(
                    read_capped(proc.stdout, self.max_output), read_capped(proc.stderr, self.max_output)))
                completed = await proc.wait()
            except asyncio.CancelledError:
                # Our deadline (or the caller's cancellation): stop the remote command now rather than
                # at its remote backstop. sshd killpg()s the session on a 'signal' request.
                with contextlib.suppress(Exception):
                    proc.send_signal("TERM")
                proc.close()
                raise
            except (OSError, asyncssh.Error) as e:
                self._drop(conn)
                raise TransportError(f"{self.target}: {type(e).__name__}: {e}") from e
        # returncode: the exit status, or minus the signal number (as asyncio reports a local one);
        # None when the channel closed with neither: the connection went away mid-command.
        rc = completed.returncode
        if rc is None:
            self._drop(conn)
            raise TransportError(f"{self.target}: connection lost before the command finished")
        return Result(rargv, rc, stdout=decode(out, odrop), stderr=decode(err, edrop),
                      took_s=time.monotonic() - t0)

    async def spawn_detached(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                             cwd: str | None = None, log_path: str | None = None,
                             timeout: float = 15.0) -> int:
        try:
            if self.os == "windows":
                if env:
                    raise ValueError("env is not supported for a detached Windows process")
                if log_path:
                    raise ValueError("a detached Windows process cannot redirect its output")
                command = self._ps_command(ps.ps_spawn_detached(check_argv(argv), cwd=cwd))
            else:
                command = posix_spawn_command(argv, env, cwd, log_path)
        except ValueError as e:
            raise SpawnError(f"spawn: {e}") from e
        res = await self.run_command(command, timeout, argv=tuple(argv))
        res = ps.interpret(res) if self.os == "windows" else _interpret_posix(res)
        return _pid_from(res)


def _pid_from(res: Result) -> int:
    if not res.ok:
        raise SpawnError(res.why())
    text = res.stdout.strip()
    if not text.isdigit():
        raise SpawnError(f"spawn: no pid in the reply: {text[:200]!r}")
    return int(text)


def _interpret_posix(res: Result) -> Result:
    """rc 126/127 with `timeout`/`env`/our marker on stderr: the program never started."""
    if res.rc not in (126, 127):
        return res
    lines = res.stderr.strip().splitlines()
    # Our own marker (a failed cd) comes after the shell's message; timeout/env speak first.
    mark = next((ln for ln in lines if ln.startswith(ps.SPAWN_MARKER)), None)
    if mark is not None:
        return replace(res, rc=None, error="spawn: " + mark[len(ps.SPAWN_MARKER):])
    if lines and _SPAWN_FAIL.match(lines[0]):
        return replace(res, rc=None, error=f"spawn: {lines[0]}")
    return res
