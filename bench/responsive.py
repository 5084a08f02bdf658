"""Benchmark: key press to screen update while one side's host hangs on every command.

A two-side sim rig, with side B moved onto an ssh host `hung` that points at a TCP listener (a thread
here) which accepts connections and never sends a byte: the SSH banner never comes, so every command
on that host hangs until its own timeout (connect_timeout_s is set to 600 s, so the connect itself never
gives up during the run). Side A stays on the local host; a `hang` fault is injected into A's evaluator
so A's heartbeat age counts up every second, which proves A's pane keeps updating.

The real entry point runs in tmux at 120x40. For each key we time from just before `tmux send-keys`
until a `capture-pane` shows the change: Tab (the focus border moves to the other pane), `?` (the help
screen opens) and `?` again (it closes). Both tmux calls are included, so the figure is an upper bound
of what an operator sees. Random gaps between keys land them at every phase of the poll cycle.

    python bench/responsive.py [--keys 150]
"""
from __future__ import annotations

import argparse
import random
import re
import socket
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ENTRY,
    Tmux,
    become_subreaper,
    left_focused,
    machine_line,
    pane_lines,
    pct,
    sim_rig,
    summary_ms,
    verdict,
)

W, H = 120, 40
HELP_MARK = "this help"
CAPTURE_GAP_S = 0.003   # between captures: leaves the CPU to the console on a 2-core machine
BEAT = re.compile(r"beat\s+\[[^\]]*\]\s+(\S+ \S+) / stall")


class SilentListener:
    """Accepts TCP connections on 127.0.0.1 and never writes: a host that hangs on every command."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
        for c in self.conns:
            c.close()


def hang_side_b(rig_yaml: Path, port: int) -> Path:
    cfg = yaml.safe_load(rig_yaml.read_text())
    kh = rig_yaml.with_name("known_hosts_hung")
    # A syntactically valid entry for another key: the check never gets that far (no banner).
    kh.write_text(f"[127.0.0.1]:{port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqGzUf0oVUOUrFYaGE5vEwQ8Rh3pO4rZ6Fq0G2mK7b1\n")
    cfg["hosts"]["hung"] = {"type": "ssh", "os": "linux", "address": "127.0.0.1", "port": port, "user": "root",
                            "known_hosts": str(kh), "connect_timeout_s": 600}
    cfg["sides"]["B"]["server"]["host"] = "hung"
    cfg["sides"]["B"]["evaluator"]["host"] = "hung"
    out = rig_yaml.with_name("rig-hung.yaml")
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def harness_floor(n: int, rnd: random.Random) -> list[float]:
    """The same send-keys + capture-pane loop against `cat` (the tty echoes the key): what the method
    itself costs on this machine right now, with no application in the way."""
    t = Tmux("resp-ref", W, H)
    out = []
    try:
        t.start(["cat"])
        t.wait(lambda s: True, 5, "tmux")
        for i in range(n):
            seen = t.screen().count("x")
            t0 = time.perf_counter()
            t.keys("x")
            while t.screen().count("x") <= seen:
                time.sleep(CAPTURE_GAP_S)
            out.append(time.perf_counter() - t0)
            if i % 60 == 59:
                t.keys("Enter")
            time.sleep(rnd.uniform(0.05, 0.25))
    finally:
        t.stop()
    return out


def beat_of(screen: str, side: int) -> str | None:
    for ln in pane_lines(screen, side, W):
        m = BEAT.search(ln)
        if m:
            return m.group(1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=150)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--healthy", action="store_true", help="reference: both sides local, no hung host")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    become_subreaper()
    print(machine_line())
    listener = SilentListener()
    try:
        with sim_rig() as rig_yaml:
            from sim import rig as sim
            cfg = rig_yaml if a.healthy else hang_side_b(rig_yaml, listener.port)
            sim.inject(rig_yaml.parent, "A", "hang")
            tmux = Tmux("resp", W, H)
            try:
                tmux.start([str(ENTRY), "-c", str(cfg)])
                tmux.wait(lambda s: "server ALIVE" in "\n".join(pane_lines(s, 0, W)), 30,
                                  "side A live")
                time.sleep(3.0)   # B's first poll is under way and hanging; A has polled a few times
                screen = tmux.screen()
                b_before = [ln.strip() for ln in pane_lines(screen, 1, W) if ln.strip()][:4]
                lat: dict[str, list[float]] = {"tab": [], "help open": [], "help close": []}
                beats: list[tuple[float, str]] = []
                t_start = time.monotonic()
                plan = ["tab", "help open", "help close"]
                i = 0
                while i < a.keys:
                    kind = plan[i % 3]
                    before = left_focused(screen, W)
                    if kind == "tab":   # A's focus border flips (B's cannot be seen while B is greyed)
                        key, cond = "Tab", (lambda s, b=before: left_focused(s, W) not in (None, b))
                    elif kind == "help open":
                        key, cond = "?", (lambda s: HELP_MARK in s)
                    else:
                        key, cond = "?", (lambda s: HELP_MARK not in s and left_focused(s, W) is not None)
                    t0 = time.perf_counter()
                    tmux.keys(key)
                    while True:
                        screen = tmux.screen()
                        if cond(screen):
                            break
                        if time.perf_counter() - t0 > 10:
                            raise TimeoutError(f"{kind}: no change within 10 s; screen:\n{screen}")
                        time.sleep(CAPTURE_GAP_S)
                    lat[kind].append(time.perf_counter() - t0)
                    if HELP_MARK not in screen:
                        b = beat_of(screen, 0)
                        if b is not None:
                            beats.append((time.monotonic() - t_start, b))
                    i += 1
                    time.sleep(rnd.uniform(0.05, 0.25))
                b_after = [ln.strip() for ln in pane_lines(tmux.screen(), 1, W) if ln.strip()][:4]
            finally:
                tmux.stop()
    finally:
        listener.close()

    floor = harness_floor(50, rnd)
    every = [x for v in lat.values() for x in v]
    for kind, v in lat.items():
        print(f"{kind:<11} {summary_ms(v)}")
    print(f"all keys    {summary_ms(every)}")
    print(f"reference: the same send-keys/capture-pane loop on `cat` (the method's own cost): {summary_ms(floor)}")
    changes = [(t, b) for k, (t, b) in enumerate(beats) if k == 0 or b != beats[k - 1][1]]
    gaps = [changes[k][0] - changes[k - 1][0] for k in range(1, len(changes))]
    max_gap = max(gaps) if gaps else float("inf")
    span = beats[-1][0] - beats[0][0] if beats else 0.0
    print(f"side A heartbeat text over {span:.0f} s: {len(changes)} distinct values "
          f"({', '.join(b for _, b in changes[:4])} … {', '.join(b for _, b in changes[-3:])}), "
          f"longest wait for a change {max_gap:.1f} s")
    print(f"side B pane at start: {' | '.join(b_before)}")
    print(f"side B pane at end:   {' | '.join(b_after)}")
    print(f"silent listener: {len(listener.conns)} connection(s) accepted, 0 bytes sent")
    p99 = pct(every, 0.99) * 1e3
    a_live = len(changes) >= max(5, span / 3) and max_gap <= 3.0
    if a.healthy:
        print(f"responsive (healthy reference, no hung host): key to screen p99 {pct(every, 0.99) * 1e3:.1f} ms")
        return 0
    print(f"responsive: key to screen p99 {p99:.1f} ms with side B's host hung, side A updating "
          f"{'yes' if a_live else 'NO'} (every {max_gap:.1f} s at worst), target p99 <= 100 ms and A updating: "
          f"{verdict(p99 <= 100 and a_live)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
