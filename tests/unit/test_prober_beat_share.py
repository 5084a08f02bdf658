"""The sides of one beat share a host's process table: polls that start in the same period of poll_s
(the app wakes them all on whole periods of the monotonic clock), however far apart a loaded machine
starts them; a poll of the next beat scans again."""
from __future__ import annotations

from ops.platform.verbs import BEAT_SHARE_S
from ops.probes.prober import Prober
from tests.tui.fakes import rig_config


def test_one_table_a_beat() -> None:
    p = Prober(rig_config(), {})          # poll_s 1.0
    assert p._same_beat(100.02, 100.95)   # one beat, polls 0.93 s apart (32 sides at load 30)
    assert not p._same_beat(100.95, 101.3)   # the next beat scans again
    assert p._same_beat(100.99, 100.99 + BEAT_SHARE_S / 2)   # straddling a boundary: the short rule
    assert not p._same_beat(100.0, 102.0) and not p._same_beat(101.0, 100.5)
