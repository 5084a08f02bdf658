"""Heartbeat = the evaluator log's mtime. A hung evaluator (futex_wait after a tick timeout) is alive and
silent, so exit-code supervision never fires; only the log going quiet for stall_s tells."""
from __future__ import annotations

from dataclasses import dataclass

from ops.platform.base import Host
from ops.platform.files import stat_file
from ops.tristate import Beat, Evidence

# Timestamps a little ahead of the clock are normal (coarse kernel clocks, a remote file server): beyond
# this, the mtime is not evidence of a live writer.
FUTURE_SLACK_S = 5.0


@dataclass(frozen=True)
class HeartbeatProbe:
    beat: Beat
    age_s: float | None
    log: str
    evidence: Evidence
    stall_s: float

    def to_json(self) -> dict:
        return {"state": self.beat.value, "age_s": None if self.age_s is None else round(self.age_s, 1),
                "log": self.log, "stall_s": self.stall_s}


async def probe_heartbeat(host: Host, log: str, stall_s: float, timeout: float,
                          within_s: float = 0.0) -> HeartbeatProbe:
    """within_s: a display's beat may take a stat made at most that long ago (platform's stat_file)."""
    st = await stat_file(host, log, timeout, within_s)
    what = f"mtime of {log} on {host.name}"
    if st.error:
        return HeartbeatProbe(Beat.UNKNOWN, None, log, Evidence(what, False, error=st.error, took_ms=st.took_ms),
                              stall_s)
    if not st.exists:
        return HeartbeatProbe(Beat.NOT_STARTED, None, log,
                              Evidence(what, True, detail="no log yet", took_ms=st.took_ms), stall_s)
    assert st.mtime is not None and st.host_now is not None
    # Both times come from the host's clock, so clock skew with the console does not fake a stall.
    age = st.host_now - st.mtime
    if age < -FUTURE_SLACK_S:
        # A log "written" in the future (a touched file, a clock stepped back, an NFS server ahead): its
        # age says nothing about whether the evaluator writes, and read as FRESH it would hide a hang.
        return HeartbeatProbe(Beat.UNKNOWN, None, log,
                              Evidence(what, False, error=f"mtime is {-age:.0f} s in the future of the host's clock",
                                       took_ms=st.took_ms), stall_s)
    age = max(0.0, age)
    beat = Beat.STALE if age > stall_s else Beat.FRESH
    return HeartbeatProbe(beat, age, log, Evidence(what, True, detail=f"{age:.0f} s old (stall at {stall_s:.0f} s)",
                                                   took_ms=st.took_ms), stall_s)
