"""An unpatched evaluator on an external-server side: it starts a second server, and the attempt stops.

Unpatched, Bench2Drive's evaluator always starts its own server (`find_free_port(--port)` skips the
external server's N..N+2 and lands on N+3, then `$CARLA_ROOT/CarlaUE4.sh ... -carla-rpc-port=N+3` in a
new session). On a side whose server is external (server.managed_by_evaluator false) that is a second
server on the same GPU, and the evaluator drives it instead of the configured one. The harness looks for
it among the attempt's descendants (an exact `-carla-rpc-port=` argv token and parentage: never a name)
and stops the attempt's whole process tree, the server group included, through the guard, with the reason.
"""
from __future__ import annotations

from ops.actions.guard import Confirmation, Guard, Op, Outcome, Target, make_plan
from ops.model import SideConfig
from ops.platform.procs import Proc, ProcTable
from ops.probes.chain import is_evaluator_of

RPC_KEY = "-carla-rpc-port="

REASON = ("the evaluator started a server of its own ({what}) although server.managed_by_evaluator is false: "
          "an unpatched Bench2Drive (it needs B2D_EXTERNAL_SERVER=1 in evaluator.env to use the external "
          "server), or set server.managed_by_evaluator: true to let it manage its server")


def second_servers(table: ProcTable, root_pid: int) -> list[Proc]:
    """Descendants of the attempt's wrapper that carry a `-carla-rpc-port=` token (a CARLA server)."""
    return [p for p in table.descendants(root_pid)
            if p.state != "Z" and any(t.startswith(RPC_KEY) for t in (p.cmdline or ()))]


def _role(p: Proc, root_pid: int, sc: SideConfig, servers: set[int]) -> str:
    if p.pid == root_pid:
        return "wrapper"
    if p.pid in servers:
        return "server"
    return "evaluator" if is_evaluator_of(p, sc) else "child"


async def stop_attempt(guard: Guard, sc: SideConfig, table: ProcTable, root_pid: int,
                       found: list[Proc]) -> tuple[Outcome, str]:
    """Stop the attempt (wrapper → ... → evaluator → its server group), exact pids, through the guard."""
    root = table.procs.get(root_pid)
    procs = [p for p in ([root] if root else []) + table.descendants(root_pid) if p.state != "Z"]
    ids = {p.pid for p in found}
    # A server's descendants are servers too (the launcher's shipping child).
    ids |= {p.pid for p in procs if any(a in ids for a in table.ancestors(p.pid))}
    host = sc.evaluator.host
    targets = [Target.of(host, p, _role(p, root_pid, sc, ids)) for p in procs]
    what = ", ".join(f"pid {p.pid} {next(t for t in (p.cmdline or ()) if t.startswith(RPC_KEY))}" for p in found)
    reason = REASON.format(what=what)
    verdicts = {"second_server": "SEEN", "evaluator": "ALIVE" if any(t.role == "evaluator" for t in targets)
                else "DEAD"}
    plan = make_plan(Op.STOP_UNPATCHED, sc.name, host, targets, verdicts, evidence=(reason,),
                     action="stop the attempt's process tree, its own server included")
    return await guard.execute(plan, Confirmation(True, "harness")), reason
