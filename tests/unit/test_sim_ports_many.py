"""The sim's port picker serves tens of sides (bench/scale.py runs 32): disjoint blocks, all free."""
from __future__ import annotations

from sim.ports import SPREAD, is_free, pick


def test_thirty_two_sides_get_disjoint_free_ports() -> None:
    got = pick(32)
    ports = [p for s in got for p in s.all]
    assert len(got) == 32 and len(set(ports)) == len(ports) == 128
    assert all(is_free(p) for p in ports)


def test_a_few_sides_keep_the_full_spread() -> None:
    got = pick(2)
    anchors = sorted(p for s in got for p in (s.rpc, s.tm))
    assert all(b - a > SPREAD for a, b in zip(anchors, anchors[1:]))
