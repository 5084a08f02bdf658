"""A one-node SLURM cluster of the test's own: munge with its own key, slurmctld, slurmd, a slurm.conf in
the test's directory (design.md §4 "SLURM").

Everything lives in one directory; nothing of the machine's own /etc/slurm or /etc/munge is read or
changed. The daemons run in the foreground as children of this process (so they are reaped, not left as
zombies of a PID 1 that never reaps), and `stop()` cancels every job of this cluster, waits until squeue
is empty and every job step of this node is gone, then stops exactly the three daemons it started.

The fake GPUs are character devices made with mknod (the major/minor of /dev/null) under the cluster's
directory: slurmd accepts them as GRES files, so a job's `--gres=gpu:1` gets a real allocation and
SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES, as on a GPU node. Where mknod is not allowed the cluster has no
GRES (`gpus == 0`).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURMCTLD = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
SLURMD = shutil.which("slurmd") or "/usr/sbin/slurmd"
MUNGED = shutil.which("munged") or "/usr/sbin/munged"
MISSING = ("slurmctld/slurmd/munged not found: the SLURM tests need `apt-get install -y slurm-wlm munge` "
           "(.ci/run does)")
START_TIMEOUT_S = 60.0     # a loaded 2-core machine: the node registers in ~1 s, allow far more
STOP_TIMEOUT_S = 60.0
# A requeued job waits cred_expire + 1 s before it starts again (the killed run's credential is revoked
# until then); SLURM's default 120 s would make the requeue test wait two minutes. Long enough still for a
# batch launch on a loaded machine.
CRED_EXPIRE_S = 30


def available() -> str | None:
    """None when the daemons are installed and we can run them (root: SlurmUser=root); else why not."""
    if not all(os.path.exists(p) for p in (SLURMCTLD, SLURMD, MUNGED)) or not shutil.which("sbatch"):
        return MISSING
    if os.geteuid() != 0:
        return "the one-node SLURM cluster runs its daemons as root (SlurmUser=root)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout_s: float, what: str, diag=lambda: "") -> None:
    """Poll cond until true; TimeoutError naming what did not happen (and the daemons' logs)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while not cond():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f} s{diag()}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@dataclass
class Cluster:
    dir: Path
    name: str
    node: str
    gpus: int
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a client of this cluster runs with (sbatch, squeue, the console)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=check, stdin=subprocess.DEVNULL)

    def job_ids(self) -> list[str]:
        """Every job squeue lists on this cluster (all states it shows: pending, running, completing)."""
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def job_field(self, job_id: str, key: str) -> str | None:
        """One `Key=value` of `scontrol show job -o ID` (None when SLURM no longer knows the job)."""
        res = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        if res.returncode != 0:
            return None
        for tok in res.stdout.split():
            k, _, v = tok.partition("=")
            if k == key:
                return v
        return None

    def steps_busy(self) -> list[str]:
        """The job-step sockets slurmd's spool holds (slurmstepd removes its own when the step ends)."""
        spool = self.dir / "spool"
        return sorted(p.name for p in spool.iterdir() if p.is_socket() and p.name.startswith(f"{self.node}_"))

    # ------------------------------------------------------------------------------------------- lifecycle

    @classmethod
    def start(cls, dir: Path, *, gpus: int = 4, cpus: int | None = None) -> Cluster:
        why = available()
        if why:
            raise RuntimeError(why)
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        node = socket.gethostname().split(".")[0]
        self = cls(dir=dir, name=f"t{os.urandom(4).hex()}", node=node, gpus=0)
        for sub in ("munge", "state", "spool", "log", "gpu"):
            (dir / sub).mkdir(exist_ok=True)
        os.chmod(dir / "munge", 0o700)
        key = dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.gpus = self._fake_gpus(gpus)
        self._write_conf(cpus or os.cpu_count() or 1)
        try:
            self._spawn("munged", [MUNGED, "-F", "--force", f"--key-file={key}",
                                   f"--socket={self.munge_socket}", f"--pid-file={dir / 'munge' / 'munged.pid'}",
                                   f"--log-file={dir / 'log' / 'munged.log'}",
                                   f"--seed-file={dir / 'munge' / 'munged.seed'}"])
            wait_for(self.munge_socket.exists, START_TIMEOUT_S, "munged did not create its socket",
                  lambda: self._diag("munged"))
            self._spawn("slurmctld", [SLURMCTLD, "-D", "-f", str(self.conf)])
            self._spawn("slurmd", [SLURMD, "-D", "-f", str(self.conf)])
            wait_for(self._node_ready, START_TIMEOUT_S, f"node {node} did not become idle",
                  lambda: self._diag("slurmctld", "slurmd"))
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    def _fake_gpus(self, n: int) -> int:
        made = 0
        null = os.stat("/dev/null")
        for i in range(n):
            path = self.dir / "gpu" / f"nvidia{i}"
            try:
                if not path.exists():
                    os.mknod(path, 0o600 | 0o020000, null.st_rdev)   # S_IFCHR
                made += 1
            except OSError:
                break
        return made

    def _write_conf(self, cpus: int) -> None:
        d = self.dir
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket},cred_expire={CRED_EXPIRE_S}",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "MpiDefault=none", "ReturnToService=2", "MinJobAge=300", "KillWait=3",
            "SchedulerParameters=sched_interval=1", "MailProg=/bin/true",
            *(["GresTypes=gpu"] if self.gpus else []),
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus}{gres} State=UNKNOWN",
            # OverSubscribe: tens of sim sides share two cores, as they would share a real node's GPUs.
            f"PartitionName=sim Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:256",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        if self.gpus:
            (d / "gres.conf").write_text(
                f"NodeName={self.node} Name=gpu File={d / 'gpu'}/nvidia[0-{self.gpus - 1}]\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        with log:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, cwd=self.dir)

    def _node_ready(self) -> bool:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode}{self._diag(name)}")
        res = self.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=10)
        return res.returncode == 0 and res.stdout.strip() in ("idle", "mixed", "allocated")

    def _diag(self, *names: str) -> str:
        out = []
        for n in names:
            for f in (self.dir / "log" / f"{n}.out", self.dir / "log" / f"{n}.log"):
                if f.exists():
                    out.append(f"--- {f}:\n" + f.read_text(errors="replace")[-2000:])
        return ("\n" + "\n".join(out)) if out else ""

    def job_diag(self, job_id: str) -> str:
        """What a wait on a job reports when it times out: the job, the node and the controller's log."""
        job = self.run("scontrol", "show", "job", job_id, check=False).stdout
        node = self.run("scontrol", "show", "node", self.node, check=False).stdout
        return f"\n--- job:\n{job}\n--- node:\n{node}" + self._diag("slurmctld", "slurmd")

    def cancel_all(self) -> None:
        """Cancel every job of this cluster (its own slurmctld: no one else's jobs) and wait until squeue is
        empty and no job step of this node is left."""
        if "slurmctld" not in self.procs or self.procs["slurmctld"].poll() is not None:
            return
        ids = self.job_ids()
        if ids:
            self.run("scancel", "--full", *ids, check=False)
        wait_for(lambda: not self.job_ids() and not self.steps_busy(), STOP_TIMEOUT_S,
                 "jobs left after scancel", lambda: f": squeue {self.job_ids()}, steps {self.steps_busy()}")

    def stop(self) -> None:
        """Every job cancelled, then the daemons we started (slurmd, slurmctld, munged), TERM then KILL."""
        try:
            self.cancel_all()
        finally:
            for name in ("slurmd", "slurmctld", "munged"):
                p = self.procs.get(name)
                if p is None or p.poll() is not None:
                    continue
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
