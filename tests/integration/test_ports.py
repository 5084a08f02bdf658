"""`ports`: the real netsh samples through --netsh-file, conflicts on a sim rig (reserved, in use, shared),
the suggestion, fail-closed UNKNOWN, and the refusal of adapter polling on a conflicting side."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from console.cli.main import main
from ops.config import load_config
from ops.model import EvaluatorConfig, ServerConfig, SideConfig
from ops.platform.listeners import parse_ss
from ops.platform.procs import LocalProcScanner
from ops.platform.types import Listeners
from ops.probes.ports import CLEAR, CONFLICT, UNKNOWN, Exclusions, OwnPids, assess, exclusions_from_text
from ops.probes.server import rpc_marker
from ops.tristate import Evidence
from sim import rig as sim
from sim.layout import SimLayout
from tests.support.evalops_sim import wait_until

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = {
    "netsh_otel_pr10839_a.txt": [[80, 80, False], [5986, 5986, False], [47001, 47001, False],
                                 [56638, 56737, False], [56738, 56837, False]],
    "netsh_otel_pr10839_b.txt": [[80, 80, False], [5986, 5986, False], [47001, 47001, False],
                                 [55679, 55679, True]],
}


@pytest.fixture(scope="module")
def rig_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("simports")
    sim.up(d, start_evaluators=False)
    try:
        yield d
    finally:
        sim.down(d)


def cli(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    return rc, capsys.readouterr().out


def ports_json(capsys, rig_dir: Path, *extra: str) -> tuple[int, dict]:
    rc, out = cli(capsys, "-c", str(rig_dir / "rig.yaml"), "ports", "--json", *extra)
    return rc, json.loads(out)


def set_excluded(rig_dir: Path, ranges: list[list]) -> None:
    SimLayout.of(rig_dir).excluded_json.write_text(json.dumps(ranges))


# ------------------------------------------------------------------------------------ real samples

@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_real_sample_yields_exactly_its_ranges(capsys, rig_dir, name) -> None:
    rc, data = ports_json(capsys, rig_dir, "--netsh-file", str(DATA / name))
    assert data["ranges"] == SAMPLES[name]
    assert all(h["state"] == "READ" for h in data["hosts"].values())
    assert rc == 0 and all(s["verdict"] == CLEAR for s in data["sides"].values())


def test_utf16_sample_as_powershell_redirects_it(capsys, rig_dir, tmp_path) -> None:
    f = tmp_path / "netsh_utf16.txt"
    f.write_bytes((DATA / "netsh_otel_pr10839_b.txt").read_text().replace("\n", "\r\n").encode("utf-16"))
    rc, data = ports_json(capsys, rig_dir, "--netsh-file", str(f))
    assert rc == 0 and data["ranges"] == SAMPLES["netsh_otel_pr10839_b.txt"]


def test_unreadable_table_is_unknown_and_exits_3(capsys, rig_dir, tmp_path) -> None:
    f = tmp_path / "denied.txt"
    f.write_text("The requested operation requires elevation (Run as administrator).\r\n")
    rc, data = ports_json(capsys, rig_dir, "--netsh-file", str(f))
    assert rc == 3
    assert all(s["verdict"] == UNKNOWN and s["suggestion"] is None for s in data["sides"].values())


def test_netsh_failing_on_the_host_is_unknown(capsys, rig_dir) -> None:
    mode = SimLayout.of(rig_dir).netsh_mode
    mode.write_text("fail\n")
    try:
        rc, data = ports_json(capsys, rig_dir)
    finally:
        mode.unlink()
    assert rc == 3 and {s["verdict"] for s in data["sides"].values()} == {UNKNOWN}
    assert "exit 1" in data["hosts"]["local"]["evidence"]


# ------------------------------------------------------------------------------------ sim rig

def test_streaming_port_in_reserved_range(capsys, rig_dir) -> None:
    rig = load_config(rig_dir / "rig.yaml")
    b = rig.sides["B"]
    n = b.server.rpc_port
    # The sim picks free ports at random: the ranges must not swallow another planned port by chance
    # (B's own TM port, A's block), or the expected conflict set would change from run to run.
    others_planned = set(rig.sides["A"].planned_ports) | {b.evaluator.tm_port}
    low = next(([lo, n - 1, True] for lo in (n - 100, n - 20, n - 3)
                if not any(lo <= p <= n - 1 for p in others_planned)), None)
    high = [n + 1, n + 60, False]
    assert not any(high[0] <= p <= high[1] for p in others_planned), "pick the sim's ports apart"
    ranges = [[80, 80, False], high] + ([low] if low else [])
    set_excluded(rig_dir, ranges)
    try:
        rc, out = cli(capsys, "-c", str(rig_dir / "rig.yaml"), "ports")
        assert rc == 1
        assert f"port {n + 1} (streaming): inside reserved range [{n + 1}, {n + 60}]" in out
        rc, data = ports_json(capsys, rig_dir)
        assert rc == 1
        side = data["sides"]["B"]
        assert side["verdict"] == CONFLICT
        assert {c["port"] for c in side["conflicts"]} == {n + 1, n + 2}
        sug = side["suggestion"]
        assert sug and sug[1:3] == [sug[0] + 1, sug[0] + 2]
        others = set(data["sides"]["A"]["planned"])
        for p in sug:
            assert not any(s <= p <= e for s, e, _ in ranges), p
            assert p not in others
        if not others_planned & {n + 61, n + 62, n + 63}:
            assert sug[0] == n + 61         # the nearest block clear of both ranges around N
        assert data["sides"]["A"]["verdict"] == CLEAR
        # launch (the evaluator-ops helper's) refuses on the same scan.
        rc, out = cli(capsys, "-c", str(rig_dir / "rig.yaml"), "launch", "B", "--dry-run", "--json")
        plan = json.loads(out)
        assert rc == 3 and plan["verdicts"]["ports"] == CONFLICT and str(n + 1) in plan["refused"]
    finally:
        set_excluded(rig_dir, [[80, 80, False]])


def test_adapter_refuses_on_a_port_conflict(capsys, rig_dir) -> None:
    rig = load_config(rig_dir / "rig.yaml")
    n = rig.sides["B"].server.rpc_port
    sim.inject(rig_dir, "B", "server-crash")          # the server must be DEAD for adapter polling
    # The crash takes a moment (a signal, an exit, the port closing): wait for the DEAD verdict itself, or
    # the refusal below is "server UNKNOWN" instead of the port conflict under test.
    def dead() -> bool:
        _rc, out = cli(capsys, "-c", str(rig_dir / "rig.yaml"), "status", "--json", "--no-rpc")
        return json.loads(out)["sides"]["B"]["server"]["state"] == "DEAD"
    assert wait_until(dead, 60, every=0.2), cli(capsys, "-c", str(rig_dir / "rig.yaml"), "status", "--json", "--no-rpc")[1]
    set_excluded(rig_dir, [[n + 1, n + 1, False]])
    try:
        rc, out = cli(capsys, "-c", str(rig_dir / "rig.yaml"), "adapter", "B", "--yes", "--json")
        report = json.loads(out)
        assert rc == 3
        assert report["plan"]["verdicts"]["ports"] == CONFLICT and report["tries"] == []
        assert "ports" in report["refused"]
        table = LocalProcScanner().scan()
        assert not [p for p in table.procs.values() if p.has_token(rpc_marker(n))]   # nothing launched
        audit = [json.loads(ln) for ln in (Path(rig.state_dir) / "audit.jsonl").read_text().splitlines()]
        assert audit[-1]["operation"] == "adapter-poll" and audit[-1]["outcome"] == "refused"
    finally:
        set_excluded(rig_dir, [[80, 80, False]])


def test_in_use_by_a_stranger_names_its_pid(capsys, rig_dir) -> None:
    rig = load_config(rig_dir / "rig.yaml")
    tm = rig.sides["A"].evaluator.tm_port
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", tm))
    s.listen()
    try:
        rc, data = ports_json(capsys, rig_dir)
    finally:
        s.close()
    import os
    a = data["sides"]["A"]
    assert rc == 1 and a["verdict"] == CONFLICT
    assert a["conflicts"] == [{"port": tm, "role": "tm", "kind": "in-use",
                               "reason": f"in use on local by pid {os.getpid()}"}]
    assert a["suggestion"][:3] == a["planned"][:3] and a["suggestion"][3] != tm


# ------------------------------------------------------------------------------------ pure logic

def _side(name: str, n: int, tm: int, host: str = "h") -> SideConfig:
    return SideConfig(name, ServerConfig(host=host, command=("x",), rpc_port=n),
                      EvaluatorConfig(host=host, conda_env="e", cwd="/w", script="s", routes="r",
                                      checkpoint="c", log="l", tm_port=tm))


def _ok(ranges=()) -> dict[str, Exclusions]:
    from ops.parse.netsh import ExclusionRange
    return {"h": Exclusions("h", "READ", tuple(ExclusionRange(*r) for r in ranges), Evidence("t", True))}


def test_own_server_is_not_a_conflict_but_a_stranger_is() -> None:
    sides = {"A": _side("A", 2000, 8000)}
    lst = {"h": Listeners("h", {2000: frozenset({10}), 2001: frozenset({10}), 8000: frozenset({99})})}
    out = assess(sides, _ok(), lst, {"A": OwnPids(frozenset({10}), frozenset())})
    assert [(c.port, c.kind) for c in out["A"].conflicts] == [(8000, "in-use")]
    assert out["A"].suggestion == (2000, 2001, 2002, 8001)


def test_shared_between_sides_and_suggestions_do_not_collide() -> None:
    sides = {"A": _side("A", 2000, 8000), "B": _side("B", 2002, 8000)}
    lst = {"h": Listeners("h", {})}
    own = {n: OwnPids(frozenset(), frozenset()) for n in sides}
    out = assess(sides, _ok(), lst, own)
    assert {c.reason for c in out["A"].conflicts} == {"shared with side B (rpc port)", "shared with side B (tm port)"}
    sa, sb = out["A"].suggestion, out["B"].suggestion
    assert sa and sb and not set(sa) & set(sb)


def test_unknowns_fail_closed() -> None:
    sides = {"A": _side("A", 2000, 8000)}
    own = {"A": OwnPids(frozenset({10}), frozenset())}
    bad = {"h": Listeners("h", error="ss: not found")}
    assert assess(sides, _ok(), bad, own)["A"].verdict == UNKNOWN
    unseen = {"h": Listeners("h", {2000: frozenset({None})})}   # owner unreadable; our server might be it
    assert assess(sides, _ok(), unseen, own)["A"].verdict == UNKNOWN
    no_own = {"A": OwnPids(frozenset(), frozenset())}
    assert assess(sides, _ok(), unseen, no_own)["A"].verdict == CONFLICT
    ex = {"h": exclusions_from_text("h", "garbage", "t")}
    res = assess(sides, ex, {"h": Listeners("h", {})}, own)["A"]
    assert res.verdict == UNKNOWN and res.suggestion is None


def test_a_line_that_cannot_be_read_makes_the_table_unknown() -> None:
    text = (DATA / "netsh_otel_pr10839_b.txt").read_text() + "    2O31    2040\n"
    e = exclusions_from_text("h", text, "t")
    assert e.state == UNKNOWN and e.unparsed and len(e.ranges) == 4


def test_ss_parser() -> None:
    text = ("LISTEN 0      4096   127.0.0.53%lo:53      0.0.0.0:*    users:((\"systemd-resolve\",pid=611,fd=14))\n"
            "LISTEN 0      128          [::]:22         [::]:*\n"
            "LISTEN 0      128       0.0.0.0:2000    0.0.0.0:*    users:((\"a\",pid=5,fd=3),(\"b\",pid=6,fd=3))\n")
    lst = parse_ss("r", text)
    assert lst.ok and lst.owners(53) == {611} and lst.owners(22) == {None} and lst.owners(2000) == {5, 6}
    assert not parse_ss("r", "garbage here\n").ok
