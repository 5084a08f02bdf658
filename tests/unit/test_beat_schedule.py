"""The TUI's beat schedule on a rig of tens of sides (console/tui/backend.py): how many served sides read
their heartbeat, and how many poll in full, on each beat; every side is still read within its period."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from console.tui.backend import FULL_EVERY, FULL_PER_BEAT, LiveBackend, beat_every, falls_on, full_every


def rig(sides: int, hosts: int) -> Any:
    side = {f"s{i + 1:02d}": SimpleNamespace(evaluator=SimpleNamespace(host=f"h{i % hosts + 1}"),
                                            server=SimpleNamespace(host=f"h{i % hosts + 1}"))
            for i in range(sides)}
    return SimpleNamespace(sides=side, poll_s=1.0, state_dir="/nonexistent")


def test_a_small_rig_keeps_the_old_cadence() -> None:
    assert full_every(2) == FULL_EVERY and beat_every(2) == 1 and beat_every(16) == 1
    assert full_every(32) == 8 and beat_every(32) == 2 and beat_every(64) == 4


def test_32_sides_on_4_hosts_spread_their_polls_and_a_beats_full_polls_share_one_host() -> None:
    r = rig(32, 4)
    b = LiveBackend(r)
    every, beats = full_every(32), beat_every(32)
    full_at: dict[str, list[int]] = {s: [] for s in r.sides}
    read_at: dict[str, list[int]] = {s: [] for s in r.sides}
    for beat in range(100, 100 + 2 * every):
        full = [s for s in r.sides if falls_on(beat, b._phase[s], every)]
        read = [s for s in r.sides if falls_on(beat, b._phase[s], beats)]
        assert len(full) <= FULL_PER_BEAT
        assert len({r.sides[s].evaluator.host for s in full}) <= 1   # one host's process table a beat
        assert len(read) == 16
        for s in full:
            full_at[s].append(beat)
        for s in read:
            read_at[s].append(beat)
    for s in r.sides:   # each side: a full poll every `every` beats, a heartbeat read every `beats`
        assert [b - a for a, b in zip(full_at[s], full_at[s][1:])] == [every]
        assert all(b - a == beats for a, b in zip(read_at[s], read_at[s][1:]))


def test_a_served_side_is_quiet_between_its_reads_and_a_side_not_served_never_is() -> None:
    """The app does not wake a side's loop on a beat its poll would read nothing (LiveBackend.quiet_beat):
    32 served sides wake 16 loops a beat, not 32 (a job's sides too); a side that is not served, every beat."""
    r = rig(32, 4)
    r.engine = "process"
    b = LiveBackend(r)
    served = {s: True for s in r.sides}
    b.live = SimpleNamespace(prober=SimpleNamespace(served=lambda s: served[s]))
    for beat in range(100, 100 + full_every(32)):
        woken = [s for s in r.sides if not b.quiet_beat(s, beat)]
        assert len(woken) == 16, (beat, woken)
        for s in r.sides:   # quiet exactly when neither its full poll nor its heartbeat read falls here
            reads = falls_on(beat, b._phase[s], full_every(32)) or falls_on(beat, b._phase[s], beat_every(32))
            assert b.quiet_beat(s, beat) is not reads
    served["s01"] = False
    assert not any(b.quiet_beat("s01", beat) for beat in range(100, 108))
    r.engine = "slurm"
    assert [b.quiet_beat(s, 100) for s in r.sides if s != "s01"] == [
        not (falls_on(100, b._phase[s], full_every(32)) or falls_on(100, b._phase[s], beat_every(32)))
        for s in r.sides if s != "s01"]
