"""Notifications through apprise to a real HTTP endpoint on 127.0.0.1 behind a `json://` URL (issue 15).

- `notify-test` reaches every URL (exit 0), and says which URL failed (exit 1);
- delivery is bounded-retried and rate-limited per side and kind, and never blocks the caller;
- the supervisor's messages (stalled, recovering, recovered, finished) name the rig, side, host, ports,
  route, quiet time, attempt and the command to act; a finished side is never notified as stalled.
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from ops.notify import Notifier, NotifyEvent
from sim import rig as sim
from tests.support.evalops_sim import cli, harness_state, sim_rig, wait_until
from tests.support.http_sink import HttpSink


@pytest.fixture(autouse=True)
def _buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_notify_test_reaches_every_url_and_names_the_failing_one(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with HttpSink() as sink, sim_rig(d, sides=("A",), start_evaluators=False) as rig_yaml:
        data = yaml.safe_load(rig_yaml.read_text())
        data["notify"] = [sink.url]
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        out = cli(rig_yaml, "notify-test", "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        msgs = sink.wait_for(lambda m: m, 10)
        assert len(msgs) == 1 and "notify-test" in msgs[0]["title"] and "rig" in msgs[0]["message"]

        data["notify"] = [sink.url, f"json://127.0.0.1:{_free_port()}/nobody"]
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        out = cli(rig_yaml, "notify-test", "--json", timeout=120)
        assert out.returncode == 1, out.stdout
        outcomes = [r["outcome"] for r in json.loads(out.stdout)["results"]]
        assert sorted(outcomes) == ["failed", "sent"]


def test_retry_rate_limit_and_never_blocking(tmp_path: Path) -> None:
    with HttpSink(fail_first=1) as sink:
        n = Notifier([sink.url], "rig", log=tmp_path / "notify.jsonl", min_interval_s=3600, retry_wait_s=0.1)
        t0 = time.monotonic()
        assert n.send(NotifyEvent("stalled", "A", "first", "body"))
        assert not n.send(NotifyEvent("stalled", "A", "second", "body"))     # same side + kind: rate-limited
        assert n.send(NotifyEvent("stalled", "B", "other side", "body"))     # another side is not
        queued_in = time.monotonic() - t0
        assert n.wait_idle(30)
        msgs = sink.wait_for(lambda m: len(m) >= 2, 10)
        assert sorted(m["title"] for m in msgs) == ["first", "other side"]
        assert sink.requests == 3                                           # the 500 was retried once
        outcomes = [r["outcome"] for r in n.results()]
        assert outcomes.count("sent") == 2 and outcomes.count("rate-limited") == 1
        print(f"queued 3 events in {queued_in * 1e3:.1f} ms")               # a figure, not an assertion


def test_supervisor_messages_say_what_where_and_how_to_act(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    sup = {"auto": True, "watch_s": 0.5, "max_recoveries": 5, "quarantine_after": 0}
    with HttpSink() as sink, sim_rig(d, sides=("A",), routes=200, supervisor=sup, notify=[]) as rig_yaml:
        data = yaml.safe_load(rig_yaml.read_text())
        data["notify"] = [sink.url]
        data["sides"]["A"]["evaluator"]["max_attempts"] = 10
        rig_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        assert wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running", 30)
        sim.inject(d, "A", "hang")
        msgs = sink.wait_for(lambda m: any("recovered" in x["title"] for x in m), 90)
        titles = [m["title"] for m in msgs]
        assert any(": stalled" in t for t in titles) and any(": recovered" in t for t in titles), titles
        stalled = next(m["message"] for m in msgs if ": stalled" in m["title"])
        for needle in ("host:", "ports: rpc", "route:", "route_index:", "quiet_s:", "attempt: 1/10",
                       f"act: carla-console -c {rig_yaml} recover A"):
            assert needle in stalled, (needle, stalled)
        assert msgs[0]["title"].startswith(f"[sim-{d.name}] A:") or "A:" in msgs[0]["title"]

        # It finishes: a 'finished' message with DS, SR and wall time; the quiet log after it is never 'stalled'.
        sim.inject(d, "A", "finish")
        msgs = sink.wait_for(lambda m: any(": finished" in x["title"] for x in m), 60)
        fin = next(m["message"] for m in msgs if ": finished" in m["title"])
        assert "ds:" in fin and "sr:" in fin and "wall_s:" in fin, fin
        assert wait_until(lambda: json.loads(cli(rig_yaml, "status", "--json", "--no-rpc").stdout)["sides"]["A"]
                          ["heartbeat"]["measured"] == "STALE", 30)
        stalls = [m for m in sink.snapshot() if ": stalled" in m["title"]]
        assert len(stalls) == 1, "a finished side was notified as stalled"
