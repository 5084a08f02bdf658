"""Benchmark: per-command latency over one reused SSH connection vs a new `ssh` client per command.

Both against the same OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py: its own host key, client key and
config; stopped and reaped by pid at the end). Reused: ops.platform.ssh.SshHost.run(["true"]) — the
console's path, remote `timeout` wrapper included. New client: `ssh -F /dev/null -i KEY -o
UserKnownHostsFile=KH -o StrictHostKeyChecking=yes -o BatchMode=yes -p PORT USER@127.0.0.1 true`, which
pays process start, key exchange, host-key check and authentication every time. Interleaved in rounds
so load drift hits both alike.

    python bench/remote.py [--n 40]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, become_subreaper, machine_line, summary_ms, verdict  # noqa: E402

sys.path.insert(0, str(ROOT))
from ops.model import HostConfig  # noqa: E402
from ops.platform.ssh import SshHost  # noqa: E402
from tests.support.sshd import Sshd  # noqa: E402


async def bench(sshd: Sshd, known_hosts: Path, n: int) -> int:
    cfg = HostConfig(name="bench", type="ssh", os="linux", address="127.0.0.1", port=sshd.port, user=sshd.user,
                     known_hosts=str(known_hosts), client_keys=(str(sshd.client_key),), connect_timeout_s=10.0)
    host = SshHost(cfg)
    argv = ["ssh", "-F", "/dev/null", "-i", str(sshd.client_key), "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(sshd.port),
            f"{sshd.user}@127.0.0.1", "true"]
    try:
        t0 = time.perf_counter()
        first = await host.run(["true"], timeout=10)
        t_first = time.perf_counter() - t0
        if not first.ok:
            raise RuntimeError(f"SshHost.run failed: {first}")
        # Warm both paths once more (page cache, sshd's first fork).
        await host.run(["true"], timeout=10)
        subprocess.run(argv, check=True, timeout=20, stdin=subprocess.DEVNULL, capture_output=True)
        reused: list[float] = []
        fresh: list[float] = []
        for _ in range(n):
            for _ in range(5):
                t0 = time.perf_counter()
                r = await host.run(["true"], timeout=10)
                reused.append(time.perf_counter() - t0)
                if not r.ok:
                    raise RuntimeError(f"SshHost.run failed: {r}")
            t0 = time.perf_counter()
            # The same work a poll would do if it spawned a client: start, connect, run, exit.
            p = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL,
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, err = await asyncio.wait_for(p.communicate(), 20)
            fresh.append(time.perf_counter() - t0)
            if p.returncode != 0:
                raise RuntimeError(f"ssh client rc {p.returncode}: {err.decode(errors='replace')}")
        connects = host.connect_count
    finally:
        await host.close()
    m_reused, m_fresh = statistics.median(reused), statistics.median(fresh)
    ratio = m_fresh / m_reused
    print(f"first SshHost.run (connect + host-key check + auth + command): {t_first * 1e3:.1f} ms")
    print(f"reused connection (SshHost.run true, {connects} connect(s) in all): {summary_ms(reused)}")
    print(f"new ssh client per command (ssh ... true):             {summary_ms(fresh)}")
    print(f"remote: reused {m_reused * 1e3:.1f} ms vs new client {m_fresh * 1e3:.1f} ms median: {ratio:.1f}x, "
          f"target >= 10x: {verdict(ratio >= 10 and connects == 1)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40, help="rounds of 5 reused + 1 new-client commands")
    a = ap.parse_args()
    become_subreaper()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="carla-bench-sshd-") as d:
        sshd = Sshd.create(Path(d) / "sshd")
        try:
            sshd.start()
            kh = sshd.write_known_hosts(Path(d) / "known_hosts")
            return asyncio.run(bench(sshd, kh, a.n))
        finally:
            sshd.cleanup()


if __name__ == "__main__":
    sys.exit(main())
