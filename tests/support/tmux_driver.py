"""A tmux server on a private socket running one command: how the end-to-end tests and the benchmarks
drive the real console in a real terminal and read its screen (`capture-pane`, as an operator would).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable

import psutil

TMUX = shutil.which("tmux") or "tmux"


class Tmux:
    """One tmux server on a private socket running one command (no shell: argv is exec'd directly)."""

    def __init__(self, name: str, width: int = 120, height: int = 40, every: float = 0.01) -> None:
        self.socket = f"carla-test-{name}-{os.getpid()}"
        self.width, self.height = width, height
        self.every = every   # between captures while waiting: capture-pane costs the tmux server
        self.server: psutil.Process | None = None
        self.pane: psutil.Process | None = None

    def cmd(self, *args: str, timeout: float = 10) -> str:
        return subprocess.run([TMUX, "-L", self.socket, "-f", "/dev/null", *args], check=True,
                              capture_output=True, text=True, timeout=timeout).stdout

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> int:
        """Start argv in a detached session; returns the pane's pid (argv's own process)."""
        extra = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        out = self.cmd("new-session", "-d", "-x", str(self.width), "-y", str(self.height), "-s", "b",
                       *extra, "-P", "-F", "#{pid} #{pane_pid}", *argv)
        server, pane = (int(x) for x in out.split())
        self.server, self.pane = psutil.Process(server), psutil.Process(pane)
        # Keep the pane's last screen if the command exits, so a crash can be read.
        self.cmd("set-option", "-t", "b", "remain-on-exit", "on")
        return pane

    def screen(self, escapes: bool = False) -> str:
        return self.cmd("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "b")

    def resize(self, width: int, height: int) -> None:
        """A bigger terminal shows more of a scrolled widget (the event log), as an operator would read back."""
        self.cmd("resize-window", "-t", "b", "-x", str(width), "-y", str(height))

    def keys(self, *keys: str) -> None:
        self.cmd("send-keys", "-t", "b", *keys)

    def wait(self, pred: Callable[[str], bool], timeout: float, what: str, every: float | None = None) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if pred(text):
                return text
            time.sleep(self.every if every is None else every)
        raise TimeoutError(f"timed out after {timeout} s waiting for {what}; screen:\n{text}")

    def dead(self) -> bool:
        """The pane's command has exited (remain-on-exit keeps the pane, so ask tmux)."""
        return self.cmd("display-message", "-p", "-t", "b", "#{pane_dead}").strip() == "1"

    def wait_dead(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.dead():
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        """End the pane's command (SIGHUP via kill-server, as a closed terminal would), then make sure
        the exact processes we started are gone: TERM/KILL by pid with psutil's identity check."""
        if self.server is None:
            return
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.cmd("kill-server", timeout=5)
        procs = [p for p in (self.pane, self.server) if p is not None]
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        for p in procs:   # ours by subreaping: collect the exit status so no zombie stays
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p.pid, os.WNOHANG)
        self.server = self.pane = None
