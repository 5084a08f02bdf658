"""The TUI's audit feed (console/tui/audit_feed.py): the local audit.jsonl plus the supervisors' lines on
remote evaluator hosts, one append-only list; a shared state dir never shows a line twice."""
from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

from console.tui.audit_feed import AuditFeed
from console.tui.backend import LiveBackend
from ops.actions.audit import Audit
from ops.config import load_config
from ops.platform.types import FileStat


def rec(n: int, host: str = "here") -> dict:
    return {"time": 1000.0 + n, "side": "a", "host": host, "operation": "relaunch", "outcome": "done", "n": n}


def test_remote_lines_join_in_arrival_order_and_local_ones_keep_coming() -> None:
    local: list[dict] = [rec(1)]
    feed = AuditFeed(lambda: list(local))
    feed.local_changed()
    assert feed.records() == [rec(1)]
    assert feed.records() is None                      # nothing new
    feed.remote_lines([json.dumps(rec(2, "gpu1")), "{cut by the tail's cap", json.dumps(rec(2, "gpu1"))])
    assert feed.records() == [rec(1), rec(2, "gpu1")]   # once, the broken line skipped
    local.append(rec(3))
    feed.local_changed()
    assert feed.records() == [rec(1), rec(2, "gpu1"), rec(3)]   # appended: the event log shows by count


def test_a_shared_state_dir_shows_each_line_once() -> None:
    local = [rec(1, "gpu1"), rec(2, "gpu1")]
    feed = AuditFeed(lambda: list(local))
    feed.remote_lines([json.dumps(r) for r in local])   # the remote tail IS the local file
    feed.local_changed()                                # read after the tail, as LiveBackend.audit does
    assert feed.records() == local


def test_a_rotated_local_file_starts_the_feed_over() -> None:
    local = [rec(1), rec(2)]
    feed = AuditFeed(lambda: list(local))
    feed.local_changed()
    assert feed.records() is not None
    local[:] = [rec(9)]
    feed.local_changed()
    assert feed.records() == [rec(9)]


class RemoteHost:
    name, os, is_local = "gpu1", "linux", False

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.platform = self
        self.asked: list[str] = []
        self.size: int | None = 100   # of the host's audit file, as its stat (an agent's push) says; None: absent

    async def stat_file(self, path: str, timeout: float, within_s: float = 0.0) -> FileStat:
        if self.size is None:
            return FileStat(exists=False, host_now=1001.0)
        return FileStat(exists=True, mtime=1000.0, size=self.size, host_now=1001.0)

    async def tail_lines(self, path: str, n: int, timeout: float, max_bytes: int) -> list[str] | None:
        self.asked.append(path)
        return self.lines


def remote_rig(tmp_path: Path):
    """One side whose server and evaluator run on the ssh host gpu1."""
    rig_yaml = tmp_path / "rig.yaml"
    rig_yaml.write_text(textwrap.dedent(f"""\
        version: 1
        state_dir: {tmp_path / 'state'}
        hosts:
          gpu1: {{type: ssh, address: gpu1.lab}}
        sides:
          a:
            server: {{host: gpu1, command: [/opt/carla/CarlaUE4.sh], rpc_port: 2000}}
            evaluator: {{host: gpu1, conda_env: b2d, cwd: /b2d, script: ev.py, routes: r.xml,
                        checkpoint: a.json, log: a.log}}
        """))
    return load_config(rig_yaml)


def test_the_live_backend_reads_a_remote_hosts_audit_through_the_host(tmp_path: Path) -> None:
    rig = remote_rig(tmp_path)
    Audit(rig.state_dir).write({"side": "a", "host": "gpu1", "operation": "launch", "outcome": "done"})
    host = RemoteHost([json.dumps(rec(5, "gpu1"))])
    backend = LiveBackend(rig)
    backend.live = SimpleNamespace(hosts={"gpu1": host})
    first = backend.audit()
    assert first is not None and [r["operation"] for r in first] == ["launch"]

    async def poll_starts() -> None:   # what each beat's probe of the side does first, beside the probe
        backend._start_remote_audit("a")
        await asyncio.gather(*backend._audit_tasks)
    asyncio.run(poll_starts())
    assert host.asked == [str(Path(rig.state_dir) / "audit.jsonl")]
    got = backend.audit()
    assert got is not None and got[-1] == rec(5, "gpu1")
    asyncio.run(poll_starts())                          # within REMOTE_EVERY_S: not asked again
    assert len(host.asked) == 1 and backend.audit() is None
    backend._feed._asked.clear()                        # due again, but the file's stat has not moved
    asyncio.run(poll_starts())
    assert len(host.asked) == 1
    host.size = 180                                     # a line was appended there: its tail is read
    host.lines = [json.dumps(rec(5, "gpu1")), json.dumps(rec(6, "gpu1"))]
    backend._feed._asked.clear()
    asyncio.run(poll_starts())
    assert len(host.asked) == 2 and (backend.audit() or [])[-1] == rec(6, "gpu1")


def test_a_host_with_no_audit_file_is_not_tailed_until_one_appears(tmp_path: Path) -> None:
    """Its supervisors have not audited there yet: a stat that finds no file means nothing to tail (each
    host's look came twice a second, a round trip each, on a rig of tens of sides)."""
    rig = remote_rig(tmp_path)
    host = RemoteHost([json.dumps(rec(7, "gpu1"))])
    host.size = None
    backend = LiveBackend(rig)
    backend.live = SimpleNamespace(hosts={"gpu1": host})
    backend.audit()

    async def poll_starts() -> None:
        backend._feed._asked.clear()   # due on every look
        backend._start_remote_audit("a")
        await asyncio.gather(*backend._audit_tasks)
    asyncio.run(poll_starts())
    asyncio.run(poll_starts())
    assert host.asked == []
    host.size = 90                     # the first supervisor audited there
    asyncio.run(poll_starts())
    assert len(host.asked) == 1 and (backend.audit() or [])[-1] == rec(7, "gpu1")


def test_a_remote_tail_read_again_takes_only_its_new_lines() -> None:
    """A host's tail is mostly the lines read last time: those are neither parsed nor added again, and a
    line cut by the byte cap (not JSON yet) is taken once it is whole."""
    feed = AuditFeed(lambda: [])
    feed.local_changed()
    whole = json.dumps(rec(1, "gpu1"))
    feed.remote_lines([whole, whole[:10]])
    assert feed.records() == [rec(1, "gpu1")]
    feed.remote_lines([whole, whole[:10]])
    assert feed.records() is None
    feed.remote_lines([whole, json.dumps(rec(2, "gpu1"))])
    assert feed.records() == [rec(1, "gpu1"), rec(2, "gpu1")]
