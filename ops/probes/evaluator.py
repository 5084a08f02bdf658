"""The evaluator's side of a snapshot: its chain in the process table, its checkpoint's progress and DS.

A checkpoint caught half-written parses as an error: progress is then UNKNOWN (null), never 0, and the
file is never touched because of it.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from ops.model import RigConfig, SideConfig
from ops.parse.checkpoint import Checkpoint, driving_score, last_status, parse_checkpoint
from ops.parse.errors import ParseError
from ops.platform.base import Host
from ops.platform.files import read_text, stat_file
from ops.platform.listeners import pid_listen_ports
from ops.platform.procs import ProcTable
from ops.platform.verbs import BEAT_SHARE_S
from ops.probes.chain import Chain, find_chain
from ops.probes.harness_state import HarnessState, StateCache, read_state_on
from ops.tristate import Evidence, State, Verdict


@dataclass(frozen=True)
class CheckpointReading:
    checkpoint: Checkpoint | None
    error: str | None
    missing: bool = False
    mtime: float | None = None

    @property
    def progress(self) -> tuple[int, int] | None:
        """Bench2Drive's own `progress` [index, total], not a count of records: the running route's record
        (index -1) is never written, and a resumed run's replaced records vanish from the file while later
        ones stay, so len(records) over-counts ("5 completed" when 4 are)."""
        if self.checkpoint is None:
            return None
        return self.checkpoint.progress


class CheckpointCache:
    """Re-parse a checkpoint only when its mtime or size moved: it changes once a route, the poll is 1 Hz."""

    def __init__(self) -> None:
        self._key: dict[str, tuple[float | None, int | None]] = {}
        self._val: dict[str, CheckpointReading] = {}

    async def read(self, host: Host, path: str, timeout: float, within_s: float = 0.0) -> CheckpointReading:
        st = await stat_file(host, path, timeout, within_s)
        if st.error:
            return CheckpointReading(None, st.error)
        if not st.exists:
            return CheckpointReading(None, None, missing=True)
        cache_key = f"{host.name}:{path}"
        if self._key.get(cache_key) == (st.mtime, st.size) and cache_key in self._val:
            return self._val[cache_key]
        ft = await read_text(host, path, timeout)
        if ft.missing:
            return CheckpointReading(None, None, missing=True)
        if ft.text is None:
            return CheckpointReading(None, ft.error)
        parsed = parse_checkpoint(ft.text)
        if isinstance(parsed, ParseError):
            # Half-written (caught mid-rewrite): do not cache, the next poll will see the finished file.
            return CheckpointReading(None, f"{parsed.reason}: {parsed.text[:120]!r}", mtime=st.mtime)
        reading = CheckpointReading(parsed, None, mtime=st.mtime)
        self._key[cache_key] = (st.mtime, st.size)
        self._val[cache_key] = reading
        return reading


@dataclass(frozen=True)
class EvaluatorProbe:
    verdict: Verdict             # ALIVE: the evaluator process is there; DEAD: the table says it is not
    chain: Chain
    harness: HarnessState | None
    harness_alive: bool
    checkpoint: CheckpointReading
    phase: str                   # running | restarting | finished | stopped | absent | unknown
    # The TCP ports the evaluator process listens on (its TrafficManager): Bench2Drive moves to the next
    # free TM port without a word. None: not measured (not running, or not on this machine); a string:
    # the measurement failed.
    listening: frozenset[int] | str | None = None

    def tm_drift(self, planned: int) -> bool | None:
        """True when the evaluator listens, but not on the planned TM port; None when unknown."""
        if not isinstance(self.listening, frozenset) or not self.listening:
            return None
        return planned not in self.listening

    @property
    def pid(self) -> int | None:
        ev = self.chain.evaluator
        return ev.pid if ev else None

    @property
    def ds(self) -> float | None:
        cp = self.checkpoint.checkpoint
        return driving_score(cp) if cp else None

    @property
    def last_status(self) -> str | None:
        cp = self.checkpoint.checkpoint
        return last_status(cp) if cp else None


EvaluatorFiles = tuple[CheckpointReading, HarnessState | None | str]


async def evaluator_files(rig: RigConfig, side: SideConfig, host: Host, cache: CheckpointCache, timeout: float,
                          states: StateCache | None = None, within_s: float = 0.0) -> EvaluatorFiles:
    """The side's checkpoint and harness state: what probe_evaluator reads besides the process table.
    On another host the two reads go out together (each is a round trip); here they are a stat each."""
    cp_path = side.evaluator.path(side.evaluator.checkpoint)
    if host.is_local:
        return (await cache.read(host, cp_path, timeout, within_s),
                await read_state_on(host, rig, side.name, timeout, states, within_s))
    cp, hs = await asyncio.gather(cache.read(host, cp_path, timeout, within_s),
                                  read_state_on(host, rig, side.name, timeout, states, within_s))
    return cp, hs


async def probe_evaluator(rig: RigConfig, side: SideConfig, host: Host, table: ProcTable,
                          cache: CheckpointCache, timeout: float, states: StateCache | None = None,
                          files: Awaitable[EvaluatorFiles] | None = None) -> EvaluatorProbe:
    """files: the evaluator_files read already under way (a remote side's poll starts it beside the table)."""
    cp, hs = await (files if files is not None else evaluator_files(rig, side, host, cache, timeout, states))
    harness = hs if isinstance(hs, HarnessState) else None
    if not table.ok:
        v = Verdict(State.UNKNOWN, (table.evidence(),), f"process table unreadable: {table.error}")
        return EvaluatorProbe(v, Chain(()), harness, False, cp, "unknown")
    chain = find_chain(table, rig, side, local=host.is_local)
    ev = chain.evaluator
    harness_alive = chain.harness is not None
    detail = ", ".join(f"{m.role} {m.proc.pid}" for m in chain.members) or "no process of this side"
    evidence: tuple[Evidence, ...] = (table.evidence(), Evidence(f"chain of side {side.name}", True, detail=detail))
    listening: frozenset[int] | str | None = None
    if ev is not None:
        verdict = Verdict(State.ALIVE, evidence, f"evaluator pid {ev.pid}")
        phase = "running"
        if host.is_local:
            listening = pid_listen_ports(ev.pid, fresh_within_s=BEAT_SHARE_S)
    else:
        verdict = Verdict(State.DEAD, evidence, "no evaluator process")
        finished = cp.checkpoint is not None and cp.checkpoint.entry_status == "Finished"
        if harness_alive:
            phase = "restarting"
        elif finished or (harness is not None and harness.status == "finished"):
            phase = "finished"
        elif harness is not None and harness.status in ("failed", "stopped", "refused"):
            phase = "stopped"
        else:
            phase = "absent"
    if isinstance(hs, str):
        # A state file that is not what the harness writes (null, a string, a number, a wrong field): the
        # phase and the attempts cannot be told, so the side is UNKNOWN and nothing destructive follows.
        evidence = (*evidence, Evidence("harness state", False, error=hs))
        verdict = Verdict(State.UNKNOWN, evidence, f"harness state unreadable ({hs}); "
                          f"{verdict.summary}: fix or remove the file")
        phase = "unknown"
    return EvaluatorProbe(verdict, chain, harness, harness_alive, cp, phase, listening)
