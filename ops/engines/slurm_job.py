"""What a side's SLURM job runs on its node (`carla-console -c RIG job-run SIDE|@SIDES_FILE`).

    free ports on this node (the config's block when it is free here, else the kernel's pick)
    the GPU of the allocation (SLURM_JOB_GPUS: the node's own index) → -graphicsadapter=K, --gpu-rank K
    STATE/sides/SIDE/job.json: job id, node, ports, GPU, our pid — where the console reads them
    the side's server (its configured command + the two tokens), a child of this job: scancel ends it
    the side's harness, in this process: the same supervisor as a local run (attempts, resume rule, guard)
    on exit: the server stopped (our own child, by its Popen), the harness's exit code returned

The whole tree stays inside the job (no setsid, no double fork): SLURM's process tracking sees it, and a
cancel or a node failure ends all of it.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ops.engines.overlay import job_record_path
from ops.model import RigConfig, SideConfig
from ops.platform.atomic import write_json
from ops.platform.procs import stat_state
from ops.probes.server import rpc_marker

SERVER_START_S = 60.0


def side_from_arg(arg: str, env: dict[str, str]) -> str:
    """`SIDE`, or `@FILE` with FILE's `sides` list indexed by SLURM_ARRAY_TASK_ID (a job array)."""
    if not arg.startswith("@"):
        return arg
    data = json.loads(Path(arg[1:]).read_text())
    task = env.get("SLURM_ARRAY_TASK_ID")
    if task is None or not task.isdigit():
        raise ValueError(f"{arg}: a sides file needs SLURM_ARRAY_TASK_ID (got {task!r})")
    return str(data["sides"][int(task)])


def allocated_gpu(env: dict[str, str]) -> int | None:
    """The node-level index of the first GPU SLURM gave the job (SLURM_JOB_GPUS, else GPU_DEVICE_ORDINAL).
    CUDA_VISIBLE_DEVICES is not used: under cgroup confinement it renumbers from 0."""
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL"):
        first = env.get(key, "").split(",")[0].strip()
        if first.isdigit():
            return int(first)
    return None


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(side: SideConfig) -> tuple[int, int]:
    """(rpc, tm): the configured block when all four ports are free on this node, else a fresh block."""
    rpc, tm = side.server.rpc_port, side.evaluator.tm_port
    if all(_free(p) for p in (rpc, rpc + 1, rpc + 2, tm)):
        return rpc, tm
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            base = s.getsockname()[1]
        if base + 3 < 65535 and all(_free(p) for p in (base, base + 1, base + 2, base + 3)):
            return base, base + 3
    raise RuntimeError("no free block of 4 ports on this node")


def effective(rig: RigConfig, side: str, rpc: int, tm: int, gpu: int | None) -> RigConfig:
    """The rig as this job runs it: this side's ports and adapter from the node, --gpu-rank to match."""
    sc = rig.side(side)
    server = dataclasses.replace(sc.server, rpc_port=rpc, adapter=gpu if gpu is not None else sc.server.adapter)
    args = tuple((k, v) for k, v in sc.evaluator.args if k != "gpu-rank")
    if server.adapter is not None:
        args += (("gpu-rank", str(server.adapter)),)
    evaluator = dataclasses.replace(sc.evaluator, tm_port=tm, args=args)
    sides = {**rig.sides, side: dataclasses.replace(sc, server=server, evaluator=evaluator)}
    return dataclasses.replace(rig, sides=sides)


def _wait_listen(proc: subprocess.Popen, port: int, within: float) -> str | None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"server exited {proc.returncode} before listening on {port}"
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return None
        time.sleep(0.1)
    return f"server not listening on {port} within {within:.0f} s"


def _stop(proc: subprocess.Popen) -> None:
    """The server's whole group: the launcher does not forward SIGTERM to the shipping server (like
    CarlaUE4.sh), and the group is the one we created for it, so it holds nothing else."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(proc):
            time.sleep(0.1)
        if not _group_alive(proc):
            break
    proc.poll()


def _group_alive(proc: subprocess.Popen) -> bool:
    proc.poll()   # reap the launcher if it exited (the group may still hold the server)
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


WORKER_ENV = "CARLA_CONSOLE_JOB_WORKER"
PR_SET_CHILD_SUBREAPER = 36


def _children_of(pid: int) -> list[int]:
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == pid and stat_state(fields) != "Z":
                out.append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def keeper(rig: RigConfig, arg: str) -> int:
    """The job's first process: a child subreaper around the worker (the real job-run). SLURM's
    proctrack/linuxproc follows parent links, so a process whose parent died is lost to it: were the worker
    killed from outside, its server and evaluator would run on outside the job (and a requeued job would
    start a second evaluator for the side). Orphans come to us instead; when the worker is gone we stop
    them (TERM, then KILL) and return its status, so the job ends with everything it started."""
    import ctypes
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    worker = subprocess.Popen([sys.executable, "-m", "console", "-c", rig.path, "job-run", arg],
                              env={**os.environ, WORKER_ENV: "1"}, stdin=subprocess.DEVNULL)

    def forward(*_: object) -> None:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, forward)
    rc = worker.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = _children_of(os.getpid())
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)   # ours: reparented to this subreaper, nothing else can be our child
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            left = _children_of(os.getpid())
            time.sleep(0.1)
    return rc if rc >= 0 else 128 - rc


def main(rig: RigConfig, arg: str) -> int:
    if os.environ.get(WORKER_ENV) != "1":
        return keeper(rig, arg)
    return work(rig, arg)


def work(rig: RigConfig, arg: str) -> int:
    from ops.actions.harness import Harness
    from ops.platform.procs import read_proc

    env = dict(os.environ)
    side = side_from_arg(arg, env)
    if side not in rig.sides:
        print(f"carla-console job-run: no side {side!r} in {rig.path}", file=sys.stderr)
        return 2
    sc = rig.side(side)
    rpc, tm = free_ports(sc)
    gpu = allocated_gpu(env)
    eff = effective(rig, side, rpc, tm, gpu)
    esc = eff.side(side)
    me = read_proc(os.getpid())
    record = {"side": side, "job_id": env.get("SLURM_JOB_ID"), "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
              "array_task_id": env.get("SLURM_ARRAY_TASK_ID"), "node": env.get("SLURMD_NODENAME"),
              "restart": int(env.get("SLURM_RESTART_COUNT", "0") or 0),
              "rpc_port": rpc, "tm_port": tm, "adapter": esc.server.adapter, "gpus": env.get("SLURM_JOB_GPUS"),
              "pid": os.getpid(), "create_time": me.create_time if me else None, "started": time.time(),
              "status": "starting-server"}
    path = job_record_path(rig, side)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    argv = [*esc.server.command, rpc_marker(rpc)]
    if esc.server.adapter is not None:
        argv.append(f"-graphicsadapter={esc.server.adapter}")
    log = path.parent / "server.log"
    with open(log, "ab") as fh:
        # Its own session and group (still a descendant of this job: SLURM's tracking and scancel reach it).
        server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        why = _wait_listen(server, rpc, max(SERVER_START_S, esc.server.start_wait_s))
        if why:
            write_json(path, {**record, "status": "server-failed", "detail": why})
            print(f"job-run {side}: {why} (see {log})", file=sys.stderr)
            return 1
        sp = read_proc(server.pid)
        write_json(path, {**record, "status": "running", "server_pid": server.pid,
                          "server_create_time": sp.create_time if sp else None})
        rc = asyncio.run(Harness(eff, side).run())
        write_json(path, {**record, "status": "ended", "exit_code": rc, "ended": time.time()})
        return rc
    finally:
        _stop(server)
