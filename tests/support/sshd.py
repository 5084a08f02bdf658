"""A real OpenSSH sshd on 127.0.0.1 for tests: its own host key, client key, config, pid file.

Everything lives in one temp directory; nothing of the machine's own ssh setup is read or changed.
`stop()` kills exactly the processes this object started: the listener (by the pid we spawned) and its
descendants (the per-connection sshd processes and the commands they run), found from that pid.
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SSHD = os.environ.get("CARLA_CONSOLE_SSHD", "/usr/sbin/sshd")
MISSING = (f"{SSHD} not found: the SSH tests need OpenSSH's server. Install it with "
           "`apt-get install -y openssh-server` (.ci/run does).")


def _live(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> str:
    """An ed25519 key pair at path / path.pub; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, timeout=10, stdin=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Sshd:
    dir: Path
    port: int
    user: str
    client_key: Path
    host_pub: str                 # "ssh-ed25519 AAAA... comment"
    proc: subprocess.Popen | None = None
    listen: str = "127.0.0.1"     # ListenAddress (a test namespace's gateway side, e.g.)

    @classmethod
    def create(cls, dir: Path, listen: str = "127.0.0.1") -> Sshd:
        if not os.path.exists(SSHD):
            raise RuntimeError(MISSING)
        dir.mkdir(parents=True, exist_ok=True)
        os.chmod(dir, 0o700)
        # sshd insists on its privilege-separation directory existing.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        host_pub = keygen(dir / "host_ed25519", "test-host")
        client_pub = keygen(dir / "client_ed25519", "test-client")
        (dir / "authorized_keys").write_text(client_pub + "\n")
        self = cls(dir=dir, port=free_port(), user=getpass.getuser(), client_key=dir / "client_ed25519",
                   host_pub=host_pub, listen=listen)
        self.write_config()
        return self

    @property
    def config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    def write_config(self) -> None:
        d = self.dir
        self.config.write_text("\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.listen}",
            f"HostKey {d / 'host_ed25519'}",
            f"PidFile {d / 'sshd.pid'}",
            "Subsystem sftp internal-sftp",   # the console copies its probe scripts over SFTP
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",   # the tests run as root; keys only
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "StrictModes no",                      # the temp dir's modes are not sshd's business here
            "UsePAM no",
            "MaxSessions 10",                      # OpenSSH's default, stated: a test relies on it
            "PrintMotd no",
            "LogLevel VERBOSE",
            # Debian's bash sources ~/.bashrc for ssh commands only at shell level 1; here that rc runs
            # `pyenv init` (~100 ms of CPU per command on 2 cores). SHLVL=1 makes the remote shell
            # level 2, so the tests measure our code, not the machine's rc files.
            "SetEnv SHLVL=1",
            "",
        ]))

    def known_hosts_line(self, pub: str | None = None) -> str:
        key = " ".join((pub or self.host_pub).split()[:2])
        return f"[{self.listen}]:{self.port} {key}\n"

    def write_known_hosts(self, path: Path, pub: str | None = None) -> Path:
        path.write_text(self.known_hosts_line(pub))
        return path

    def start(self, wait_s: float = 10.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "sshd already running"
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection((self.listen, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sshd did not listen on {self.port} within {wait_s} s: {self.log_tail()}")

    def stop(self) -> None:
        """Kill the listener's descendants, then the listener, by pid, and reap the listener.

        Children first, while the listener still lives to reap them: once re-parented, a killed
        process may stay a zombie for as long as PID 1 leaves it (some containers never reap).
        """
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_live(k) for k in kids):
            time.sleep(0.01)
        self.proc.kill()
        self.proc.wait(5)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError as e:
            return f"(no log: {e})"

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
