"""Notifications through apprise (`notify:` in the rig config: a list of apprise URLs — ntfy://, slack://,
discord://, mailto://, tgram://, json:// ...). Senders are apprise's, never ours.

Delivery never blocks nor breaks the caller (the supervisor): `send` puts the event on a queue and
returns; one daemon thread delivers, each URL with apprise's own bounded connect/read timeouts, retried a
bounded number of times; every outcome is a line in state_dir/notify.jsonl. Rate limit: one message per
(side, kind) per `min_interval_s`; the ones dropped are counted and said in the next message of that kind.
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.model import RigConfig

# What the operator types to act, by event kind ({rig} is the config path, {side} the side).
ACT = {
    "stalled": "carla-console -c {rig} recover {side}",
    "needs-human": "carla-console -c {rig} status {side}  (then recover / restart-server / launch)",
    "gave-up": "carla-console -c {rig} launch {side}  (after reading events.jsonl)",
    "server-hung": "carla-console -c {rig} restart-server {side}",
    "server-dead": "carla-console -c {rig} restart-server {side}",
    "route-retired": "carla-console -c {rig} retired {side}",
    "finished": "carla-console -c {rig} reclaim {side}",
}
KINDS = ("stalled", "stall-cleared", "recovering", "recovered", "server-dead", "server-hung", "server-restarted",
         "route-retired", "gave-up", "needs-human", "finished", "crashed", "test")


@dataclass(frozen=True)
class NotifyEvent:
    kind: str
    side: str
    title: str
    body: str
    fields: dict[str, Any] = field(default_factory=dict, hash=False)
    at: float = field(default_factory=time.time)


class Notifier:
    def __init__(self, urls: tuple[str, ...] | list[str], rig: str = "rig", *, log: str | os.PathLike | None = None,
                 min_interval_s: float = 60.0, retries: int = 2, retry_wait_s: float = 2.0) -> None:
        self.urls = tuple(urls)
        self.rig = rig
        self.log_path = Path(log) if log else None
        self.min_interval_s = min_interval_s
        self.retries = retries
        self.retry_wait_s = retry_wait_s
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}
        self._q: queue.Queue[NotifyEvent | None] = queue.Queue()
        self._busy = threading.Event()
        self._thread: threading.Thread | None = None
        self.rig_path = ""
        self.context: dict[str, dict[str, Any]] = {}   # side -> host, adapter, ports ... (said in every message)

    @classmethod
    def for_rig(cls, rig: RigConfig) -> Notifier:
        n = cls(rig.notify, rig.name, log=Path(rig.state_dir) / "notify.jsonl")
        n.rig_path = rig.path
        return n

    # ---- sending -------------------------------------------------------------------------------------

    def send(self, ev: NotifyEvent) -> bool:
        """Queue ev unless rate-limited; returns at once. False: dropped (rate limit) or no URL."""
        if not self.urls:
            return False
        key = (ev.side, ev.kind)
        now = time.monotonic()
        last = self._last.get(key)
        if ev.kind != "test" and last is not None and now - last < self.min_interval_s:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            self._log({"kind": ev.kind, "side": ev.side, "outcome": "rate-limited"})
            return False
        self._last[key] = now
        dropped = self._dropped.pop(key, 0)
        if dropped:
            ev = NotifyEvent(ev.kind, ev.side, ev.title, ev.body + f"\n({dropped} more '{ev.kind}' rate-limited)",
                             ev.fields, ev.at)
        self._busy.set()
        self._q.put(ev)
        if self._thread is None:
            self._thread = threading.Thread(target=self._worker, name="notify", daemon=True)
            self._thread.start()
        return True

    def event(self, kind: str, message: str, state=None, **fields: Any) -> bool:
        """The supervisor's event as a message that says where, what, how far, and what to type."""
        side = state.side if state is not None else fields.get("side", "?")
        ctx = dict(self.context.get(side, {}))
        ctx.update({k: v for k, v in fields.items() if v is not None})
        if state is not None:
            ctx.setdefault("attempt", f"{state.attempt}/{state.max_attempts}")
            ctx.setdefault("recoveries", state.recoveries)
            if state.retired:
                ctx.setdefault("retired", ", ".join(state.retired))
        act = ACT.get(kind, "carla-console -c {rig} status").format(rig=self.rig_path or "RIG", side=side)
        title = f"[{self.rig}] {side}: {kind} — {message}"[:250]
        lines = [message, *(f"{k}: {v}" for k, v in ctx.items()), f"act: {act}"]
        return self.send(NotifyEvent(kind, side, title, "\n".join(lines), {**ctx, "act": act}))

    def set_context(self, side: str, **ctx: Any) -> None:
        self.context = {**self.context, side: {**self.context.get(side, {}), **ctx}}

    def _worker(self) -> None:
        import apprise
        while True:
            ev = self._q.get()
            if ev is None:
                return
            for url in self.urls:
                outcome, error = "failed", ""
                for attempt in range(1 + self.retries):
                    try:
                        ap = apprise.Apprise()
                        if not ap.add(url):
                            outcome, error = "bad-url", f"apprise does not accept {url.split('://')[0]}://"
                            break
                        if ap.notify(title=ev.title, body=ev.body):
                            outcome = "sent"
                            break
                        error = "apprise reported a failed delivery"
                    except Exception as e:  # a broken plugin must not kill the thread
                        error = f"{type(e).__name__}: {e}"
                    if attempt < self.retries:
                        time.sleep(self.retry_wait_s)
                self._log({"kind": ev.kind, "side": ev.side, "url": url.split("://")[0] + "://…",
                           "outcome": outcome, "error": error or None, "title": ev.title})
            if self._q.empty():
                self._busy.clear()

    def _log(self, rec: dict) -> None:
        if self.log_path is None:
            return
        rec = {"time": time.time(), **rec}
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
        except OSError:
            pass   # a full state dir: the supervisor says so itself; the notification log is best effort

    # ---- waiting (exit paths and notify-test only) -----------------------------------------------------

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._busy.is_set()

    async def drain(self, timeout_s: float) -> bool:
        import asyncio
        return await asyncio.to_thread(self.wait_idle, timeout_s)

    def results(self) -> list[dict]:
        if self.log_path is None:
            return []
        try:
            return [json.loads(ln) for ln in self.log_path.read_text().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return []
