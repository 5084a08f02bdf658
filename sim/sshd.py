"""A real OpenSSH sshd for `sim up --remote`: the rig's evaluator host is reached through it.

Everything lives in D/sim/sshd/NAME: its own host key, the console's client key, authorized_keys, config,
pid file, log, and the known_hosts file the rig names (the host key pinned, never auto-accepted). Nothing
of the machine's own ssh setup is read or changed. The listener is recorded in D/sim/pids.json, so
`sim down` stops it (by pid and create time) like every other process of the rig. A supervisor that
launch starts through it is in its own session (setsid) and no descendant of sshd: it survives the
connection, and stopping this sshd is how a test drops the link mid-run.
"""
from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from sim.layout import SimLayout
from sim.procs import ProcRecord, identify, record_started, started, stop, with_descendants

SSHD = os.environ.get("CARLA_CONSOLE_SSHD", "/usr/sbin/sshd")
# Carried into every ssh session: a test session's mark (tests/conftest.py finds leftovers by it), so a
# supervisor started over ssh is still one of the session's processes.
PASS_ENV = ("CARLA_CONSOLE_TEST_SESSION",)


@dataclass(frozen=True)
class SimSshd:
    dir: Path
    listen: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    pid: int

    def host_config(self, layout: SimLayout) -> dict:
        """The rig.yaml entry of a host reached through this sshd (the sim's GPU and netsh fakes there)."""
        return {"type": "ssh", "os": "linux", "address": self.listen, "port": self.port, "user": self.user,
                "known_hosts": str(self.known_hosts), "client_keys": [str(self.client_key)],
                "nvidia_smi": [str(layout.nvidia_smi)], "netsh": [str(layout.netsh)], "vram_source": "nvidia-smi"}


def _keygen(path: Path, comment: str) -> str:
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, timeout=20, stdin=subprocess.DEVNULL, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _free_port(listen: str) -> int:
    with socket.socket() as s:
        s.bind((listen, 0))
        return s.getsockname()[1]


def config_text(d: Path, listen: str, port: int, env: dict[str, str] | None = None) -> str:
    setenv = " ".join(["SHLVL=1", *(f"{k}={os.environ[k]}" for k in PASS_ENV if os.environ.get(k)),
                       *(f"{k}={v}" for k, v in (env or {}).items())])
    return "\n".join([
        f"Port {port}", f"ListenAddress {listen}", f"HostKey {d / 'host_ed25519'}", f"PidFile {d / 'sshd.pid'}",
        "Subsystem sftp internal-sftp",          # the console copies its probe scripts over SFTP
        f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",     # keys only
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "StrictModes no", "UsePAM no", "PrintMotd no", "LogLevel VERBOSE",
        # SHLVL=1: Debian's bash sources ~/.bashrc for ssh commands only at shell level 1 (heavy rc files
        # would cost every command); the test session's mark rides along (PASS_ENV).
        f"SetEnv {setenv}", "",
    ])


def _spawn(layout: SimLayout, d: Path, prefix: list[str]) -> subprocess.Popen:
    with open(d / "sshd.log", "ab") as log:
        proc = subprocess.Popen([*prefix, SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    try:
        record_started(layout, [ProcRecord.of(psutil.Process(proc.pid), "sshd")])
    except psutil.NoSuchProcess:
        pass
    return proc


def _listening(proc: subprocess.Popen, listen: str, port: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection((listen, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def listeners(layout: SimLayout, name: str = "remote") -> list[psutil.Process]:
    """The live sshd listener(s) of sim host `name` (recorded pid + create time, this host's config)."""
    config = str(layout.sim / "sshd" / name / "sshd_config")
    out = []
    for rec in started(layout):
        p = identify(rec) if rec.role == "sshd" else None
        if p is None:
            continue
        try:
            if config in p.cmdline():
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def drop(layout: SimLayout, name: str = "remote") -> int:
    """The link to sim host `name` goes down: its sshd and every ssh session it holds are killed (the
    console's connection breaks). What was started detached through it is no descendant and runs on.
    Returns how many processes were killed."""
    procs = listeners(layout, name)
    victims = with_descendants(procs)
    report = stop(list(reversed(victims)), grace_s=0.0)
    return len(report.terminated) + len(report.killed)


def restart(layout: SimLayout, name: str, prefix: list[str], wait_s: float = 15.0) -> int:
    """The link comes back: sshd again with the same config, port and host key (prefix: the argv that runs
    it on that host, sim/hosts.py); returns its pid."""
    d = layout.sim / "sshd" / name
    text = (d / "sshd_config").read_text()
    port = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("Port ")))
    listen = next(ln.split()[1] for ln in text.splitlines() if ln.startswith("ListenAddress "))
    proc = _spawn(layout, d, prefix)
    if not _listening(proc, listen, port, wait_s):
        raise RuntimeError(f"sshd for sim host {name} did not listen again on {listen}:{port}: "
                           + (d / "sshd.log").read_text(errors="replace")[-1500:])
    return proc.pid


def start(layout: SimLayout, name: str, listen: str, prefix: list[str], env: dict[str, str],
          wait_s: float = 15.0) -> SimSshd:
    """Keys, config and a running sshd for sim host `name` (prefix: the argv that runs a program there, its
    namespace; it listens on port 22 there, else on a free port of 127.0.0.1), recorded for `sim down`.
    env: set in every session. Raises RuntimeError with sshd's log."""
    if not os.path.exists(SSHD):
        raise RuntimeError(f"{SSHD} not found: `sim up --remote` needs OpenSSH's server "
                           "(apt-get install -y openssh-server)")
    d = layout.sim / "sshd" / name
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege-separation directory
    host_pub = _keygen(d / "host_ed25519", f"sim-{name}")
    (d / "authorized_keys").write_text(_keygen(d / "client_ed25519", "sim-console") + "\n")
    known_hosts = d / "known_hosts"
    last = ""
    for _ in range(3):   # a free port can be taken between the pick and sshd's bind: pick again
        port = 22 if prefix else _free_port(listen)
        (d / "sshd_config").write_text(config_text(d, listen, port, env))
        pattern = listen if port == 22 else f"[{listen}]:{port}"   # known_hosts' own syntax for port 22
        known_hosts.write_text(f"{pattern} {' '.join(host_pub.split()[:2])}\n")
        proc = _spawn(layout, d, prefix)
        if _listening(proc, listen, port, wait_s):
            return SimSshd(d, listen, port, getpass.getuser(), d / "client_ed25519", known_hosts, proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        last = (d / "sshd.log").read_text(errors="replace")[-1500:]
    raise RuntimeError(f"sshd for sim host {name} did not listen on {listen}: {last}")
