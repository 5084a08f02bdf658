"""A side's process chain: harness → conda wrapper → evaluator (→ its children), found by exact tokens.

Killing the first `pgrep -f leaderboard_evaluator` match once killed the conda wrapper (same words in its
cmdline), and the outer loop then started a second evaluator on the same server. So: whole argv tokens
only (`--port N` as two tokens or `--port=N`; a longer number that starts with N is another side), the
console's own process and ancestors are never candidates, and the plan covers the whole chain, outer first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ops.model import RigConfig, SideConfig
from ops.platform.procs import Proc, ProcTable
from ops.probes import identity
from ops.probes.server import rpc_marker

Role = Literal["harness", "wrapper", "shell", "evaluator", "child", "server"]   # server: its own, when managed


@dataclass(frozen=True)
class ChainMember:
    proc: Proc
    role: Role


@dataclass(frozen=True)
class Chain:
    members: tuple[ChainMember, ...]     # outer → inner

    def of(self, role: str) -> list[Proc]:
        return [m.proc for m in self.members if m.role == role]

    @property
    def evaluator(self) -> Proc | None:
        ev = self.of("evaluator")
        return ev[-1] if ev else None

    @property
    def harness(self) -> Proc | None:
        h = self.of("harness")
        return h[0] if h else None

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(m.proc.pid for m in self.members)


def is_harness_of(p: Proc, rig: RigConfig, side: str | SideConfig, local: bool = True) -> bool:
    sc = side if isinstance(side, SideConfig) else rig.sides.get(side)
    if sc is None:
        return False
    return identity.is_harness_of(p, rig, sc, local)


def is_evaluator_of(p: Proc, side: SideConfig) -> bool:
    """The side's evaluator program carrying the side's RPC port and TM port as whole tokens."""
    return identity.is_evaluator_of(p, side)


def protected_pids(table: ProcTable) -> frozenset[int]:
    """This console process and its ancestors: never a candidate, whatever their cmdline says."""
    me = os.getpid()
    return frozenset([me, *table.ancestors(me)])


def find_chain(table: ProcTable, rig: RigConfig, side: SideConfig, local: bool = True) -> Chain:
    """_find_chain, once per table's processes, rig and side (ProcTable.derived)."""
    key = ("chain", side.name, local)
    hit = table.derived.get(key)
    if hit is not None and hit[0] is rig and hit[1] is side:
        return hit[2]
    chain = _find_chain(table, rig, side, local)
    table.derived[key] = (rig, side, chain)
    return chain


def _find_chain(table: ProcTable, rig: RigConfig, side: SideConfig, local: bool = True) -> Chain:
    """The side's chain: each process verified as the side's own (harness, conda wrapper, evaluator —
    program and exact tokens, see ops/probes/identity.py) with everything below it, outer → inner.

    Only verified processes are roots: an ancestor that merely carries the tokens (a tmux server keeps
    the argv it was started with) is never one, so a sibling subtree of a shared ancestor (another tmux
    window, another job) is never in the chain."""
    protected = protected_pids(table) if local else frozenset()
    server_marker = rpc_marker(side.server.rpc_port)
    # A zombie has exited (its parent, often a PID 1 that never reaps, just has not collected it): it
    # can neither run nor be signalled, so it is no member of a live chain.
    # Every harness or evaluator of the side carries one of these tokens: one set test a process (in C)
    # before the exact checks, which run every poll on every process of the host otherwise.
    rpc = str(side.server.rpc_port)
    port_marks = (rpc, f"--port={rpc}")
    # Every side's harness carries "harness"; this side's also carries its name (`harness SIDE`): one more
    # set test keeps the other sides' harnesses out of the exact checks (tens of sides: tens each a poll).
    candidates = [p for p in table.with_tokens("harness", *port_marks) if p.pid not in protected and p.state != "Z"
                  and (side.name in p.tokens or any(m in p.tokens for m in port_marks))]
    harnesses = [p for p in candidates if is_harness_of(p, rig, side, local)]
    with_ports = [p for p in candidates if identity.has_side_ports(p, side)]
    evaluators = [p for p in with_ports if identity.runs_script(p, side.evaluator)]
    wrappers = [p for p in with_ports if identity.is_wrapper_of(p, side.evaluator)]
    verified = {p.pid for p in harnesses} | {p.pid for p in evaluators} | {p.pid for p in wrappers}
    roots = [p for p in harnesses + wrappers + evaluators
             if not any(a in verified for a in table.ancestors(p.pid))]
    roots = list({p.pid: p for p in roots}.values())
    roots.sort(key=lambda p: (0 if p in harnesses else 1, p.create_time))

    members: list[ChainMember] = []
    seen: set[int] = set()
    eval_pids = {p.pid for p in evaluators}
    servers = _server_pids(table, server_marker) if roots else set()
    for root in roots:
        for p in [root, *table.descendants(root.pid)]:
            if p.pid in seen or p.pid in protected or p.state == "Z":
                continue
            in_server = p.pid in servers or any(a in servers for a in table.ancestors(p.pid))
            under_evaluator = any(a in eval_pids for a in table.ancestors(p.pid))
            # A server the harness started is the server's business, not the evaluator chain's. But a
            # server the evaluator started itself (server.managed_by_evaluator: unpatched Bench2Drive) is
            # part of the chain: its exact port token and its parentage say so, and stopping the
            # evaluator by SIGTERM skips the atexit that would kill it (an orphan server otherwise).
            if in_server and not (side.server.managed_by_evaluator and under_evaluator):
                continue
            seen.add(p.pid)
            role: Role = "server" if in_server else _role(p, harnesses, eval_pids, {w.pid for w in wrappers}, table)
            members.append(ChainMember(p, role))
    return Chain(tuple(members))


def _server_pids(table: ProcTable, marker: str) -> set[int]:
    return {p.pid for p in table.with_tokens(marker)}


def _role(p: Proc, harnesses: list[Proc], eval_pids: set[int], wrapper_pids: set[int], table: ProcTable) -> Role:
    if p in harnesses:
        return "harness"
    if p.pid in wrapper_pids:
        return "wrapper"
    inner = [c for c in table.descendants(p.pid) if c.pid in eval_pids]
    if p.pid in eval_pids:
        # A process running the script that started another one (a re-exec'd launcher script): the
        # outer is a wrapper of the inner, which is the evaluator.
        return "wrapper" if inner else "evaluator"
    # conda run's `/usr/bin/bash /tmp/tmpXXXX` between the wrapper and the evaluator.
    return "shell" if inner else "child"
