"""A side whose evaluator runs on another Linux host, reached by ssh (issue 19, part 1).

The supervisor runs ON that host: launch starts `python -m console -c RIG harness SIDE --as-host NAME`
there through `setsid` (ops/platform/ssh.py posix_spawn_command), so it survives the ssh connection and
the console. Inside it, `on_host(rig, NAME)` is the rig as that host sees it: NAME is its local machine
(its /proc, its files, its process identities: recoveries re-check pids where they run) and only the
sides that live wholly on NAME are in view. The rig file, the state dir, the logs and the checkpoint have
the same paths on both machines (a lab's shared home or NFS; the sim's hosts share one filesystem).

The console never assumes those files are local: it reads a remote side's checkpoint, routes file,
harness state and log through the host's platform (bounded reads with a timeout), and the checkpoint's
backup is written on the host by the harness before its first attempt (as before every attempt).

Not supported, refused with the reason: an evaluator host that is not an ssh Linux host, and a server on
another host than the evaluator's (the supervisor on the evaluator's host would have to reach a third host).
"""
from __future__ import annotations

import asyncio
import dataclasses
import posixpath
import sys
import time

from ops.actions.resume import CP_UNKNOWN, CheckpointRead, ResumeDecision, decide, decide_read
from ops.model import HostConfig, RigConfig, SideConfig
from ops.platform.base import Host
from ops.probes.harness_state import HarnessState, read_state_on, side_dir

READ_TIMEOUT_S = 10.0
MAX_FILE_BYTES = 16 * 1024 * 1024
AS_HOST_FLAG = "--as-host"


def refusal(rig: RigConfig, host: Host, sc: SideConfig) -> str | None:
    """Why a detached run of `sc` cannot be started on its (remote) evaluator host; None when it can."""
    cfg = rig.hosts.get(sc.evaluator.host)
    if cfg is None or cfg.type != "ssh" or host.os != "linux":
        kind = "unknown" if cfg is None else f"{cfg.type}/{host.os}"
        return (f"evaluator host {sc.evaluator.host} ({kind}) is not this machine and not an ssh Linux host: "
                "a detached run is started only here or on an ssh Linux host")
    if sc.server.host != sc.evaluator.host:
        return (f"the server runs on {sc.server.host}, the evaluator on the remote host {sc.evaluator.host}: "
                "a supervisor on that host cannot reach a server on a third host; put both on "
                f"{sc.evaluator.host}, or run the evaluator on this machine")
    return None


def harness_argv(rig: RigConfig, side: str, host: str) -> list[str]:
    """The supervisor as started on `host` (the same `-c RIG` ... `harness SIDE` tokens the chain finds)."""
    python = rig.hosts[host].console_python or sys.executable
    return [python, "-m", "console", "-c", rig.path, "harness", side, AS_HOST_FLAG, host]


def on_host(rig: RigConfig, name: str) -> RigConfig:
    """The rig as host `name` sees it: that host is local, and only the sides wholly on it remain (a
    supervisor there acts on nothing else; the other hosts are not its to reach)."""
    cfg = rig.hosts[name]
    local = HostConfig(name=name, type="local", os=cfg.os, nvidia_smi=cfg.nvidia_smi, netsh=cfg.netsh,
                       vram_source=cfg.vram_source, memory_floor_mb=cfg.memory_floor_mb)
    sides = {n: s for n, s in rig.sides.items() if s.evaluator.host == name and s.server.host == name}
    return dataclasses.replace(rig, hosts={name: local}, sides=sides, engine="process", slurm=None)


# ---- reading a remote side's files through its host ------------------------------------------------


async def read_bytes(host: Host, path: str, timeout: float = READ_TIMEOUT_S) -> CheckpointRead:
    """A file's content on the host (UTF-8 text: checkpoints and routes files are JSON / XML)."""
    ft = await host.platform.read_text(path, timeout, MAX_FILE_BYTES)
    if ft.missing:
        return CheckpointRead(None)
    if ft.text is None:
        return CheckpointRead(None, ft.error or f"read {path} on {host.name}: no answer")
    return CheckpointRead(ft.text.encode("utf-8"))


async def decide_on(host: Host, sc: SideConfig) -> tuple[ResumeDecision, CheckpointRead, CheckpointRead]:
    """resume.decide_for, with the checkpoint and routes file read on the evaluator's host."""
    ev = sc.evaluator
    cp, rt = await asyncio.gather(read_bytes(host, ev.path(ev.checkpoint)), read_bytes(host, ev.path(ev.routes)))
    if cp.error:
        why = f"checkpoint on {host.name} UNKNOWN: {cp.error}"
        return ResumeDecision(False, why, CP_UNKNOWN, refused=why), cp, rt
    if cp.data is None:
        return decide(None), cp, rt
    return decide_read(sc, cp.data, rt), cp, rt


async def log_check(host: Host, path: str) -> tuple[str, str]:
    """(status, detail) of the evaluator's log on the host: a FIFO or a directory there is no log."""
    st = await host.platform.stat_file(path, READ_TIMEOUT_S)
    if st.error and st.exists:
        return "refused", f"log {path} on {host.name} exists and is not a regular file: remove it"
    if st.error:
        return "unknown", f"log {path} on {host.name}: {st.error}"
    return "ok", (f"{path} on {host.name} is appended to" if st.exists else f"{path} on {host.name} will be created")


async def read_state(host: Host, rig: RigConfig, side: str, timeout: float = READ_TIMEOUT_S) -> HarnessState | None | str:
    return await read_state_on(host, rig, side, timeout)


async def prepare(host: Host, rig: RigConfig, side: str) -> str | None:
    """The side's state folder on the host (the harness's log goes there); the error in words, or None."""
    folder = str(side_dir(rig, side))
    res = await host.run(["mkdir", "-p", "--", folder], timeout=READ_TIMEOUT_S)
    return None if res.ok else f"mkdir {folder} on {host.name}: {res.why()}"


def harness_log(rig: RigConfig, side: str) -> str:
    return posixpath.join(str(side_dir(rig, side)), "harness.log")


async def wait_harness(host: Host, rig: RigConfig, side: str, pid: int, within: float) -> HarnessState | str:
    """The remote harness's state once it has started an attempt (or given up); a reason otherwise.
    Its liveness is looked at every second in the host's process table (a harness that died before writing
    its state would otherwise cost the whole wait)."""
    deadline = time.monotonic() + within
    last = "no state yet"
    next_look = time.monotonic() + 1.0
    while True:
        st = await read_state(host, rig, side)
        if isinstance(st, HarnessState) and st.pid == pid and st.status != "starting":
            return st
        if isinstance(st, str):
            last = st
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + 1.0
            table = await host.platform.process_table(READ_TIMEOUT_S, frozenset([pid]))
            p = table.procs.get(pid) if table.ok else None
            if table.ok and (p is None or p.state == "Z"):
                st = await read_state(host, rig, side)
                if isinstance(st, HarnessState) and st.pid == pid:
                    return st
                return f"harness {pid} on {host.name} exited without a state"
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(0.25)


async def start_harness(host: Host, rig: RigConfig, side: str, argv: list[str], cwd: str,
                        within: float) -> tuple[int | None, HarnessState | str]:
    """Start the supervisor detached on the host (its own session: it outlives this ssh connection) and
    wait for its state: (pid, state) or (pid or None, the reason in words)."""
    from ops.platform.common import SpawnError
    why = await prepare(host, rig, side)
    if why:
        return None, why
    try:
        pid = await host.spawn_detached(argv, cwd=cwd, log_path=harness_log(rig, side))
    except SpawnError as e:
        return None, f"harness not started on {host.name}: {e}"
    return pid, await wait_harness(host, rig, side, pid, within)


async def write_file(host: Host, path: str, text: str, timeout: float = READ_TIMEOUT_S) -> str | None:
    """Write `text` to `path` on the host atomically (a temp file renamed over it); the error, or None.
    The text travels as an argument of a constant script, never pasted into a shell string."""
    res = await host.run(["sh", "-c", 'printf "%s" "$1" > "$2.tmp.$$" && mv -f -- "$2.tmp.$$" "$2"',
                          "write_file", text, path], timeout=timeout)
    return None if res.ok else f"write {path} on {host.name}: {res.why()}"


async def alive_on(host: Host, pid: int, create_time: float) -> bool | None:
    """Is (pid, create_time) a live process on the host? None when its process table cannot be read."""
    table = await host.platform.process_table(READ_TIMEOUT_S, frozenset([pid]))
    if not table.ok:
        return None
    p = table.procs.get(pid)
    return p is not None and p.state != "Z" and abs(p.create_time - create_time) <= 0.05
