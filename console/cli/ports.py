"""`ports [--netsh-file F] [--json]`: the winNAT exclusion scan and the planned-port check.

Exit 0 all CLEAR, 1 any conflict, 3 when something could not be read (fail-closed: launches are blocked
then too), 2 when --netsh-file cannot be read.
"""
from __future__ import annotations

import asyncio
import sys

from console.cli.exits import EXIT_FINDING, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, print_json
from ops.model import RigConfig
from ops.platform.bounded import read_regular
from ops.probes.ports import ROLES, PortScan, scan_ports
from ops.rig import open_rig


async def _scan(rig: RigConfig, text: str | None, what: str) -> PortScan:
    async with open_rig(rig) as live:
        return await scan_ports(live, text, what)


def render(scan: PortScan) -> list[str]:
    lines = []
    for name, e in scan.hosts.items():
        rng = ", ".join(f"{r.start}-{r.end}{' *' if r.administered else ''}" for r in e.ranges) or "none"
        lines.append(f"exclusions on {name} [{e.state}]: {rng}")
        lines.append(f"  {e.evidence.line()}")
        lines += [f"  unreadable line: {u!r}" for u in e.unparsed]
    lines.append("")
    rows = [("SIDE", "VERDICT", *(r.upper() for r in ROLES), "SUGGESTION")]
    for name, s in scan.sides.items():
        sug = "-" if not s.suggestion else f"{s.suggestion[0]}-{s.suggestion[2]} tm {s.suggestion[3]}"
        rows.append((name, s.verdict, *(str(p) for p in s.planned), sug))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for name, s in scan.sides.items():
        lines += [f"{name}: port {c.port} ({c.role}): {c.reason}" for c in s.conflicts]
        lines += [f"{name}: UNKNOWN: {u}" for u in s.unknown]
        if s.suggestion:
            n, _, last, tm = s.suggestion
            lines.append(f"{name}: nearest free block: rpc_port {n} (uses {n}-{last}), tm_port {tm}")
    return lines


MAX_NETSH_BYTES = 1 << 20   # netsh prints a few KB


def run(rig: RigConfig, args) -> int:
    text, what = None, "--netsh-file"
    if getattr(args, "netsh_file", None):
        try:
            # Capped before decoding, and never a FIFO or a device: `--netsh-file /dev/zero` once grew to GBs.
            raw = read_regular(args.netsh_file, MAX_NETSH_BYTES)
        except OSError as e:
            print(f"carla-console: cannot read --netsh-file: {e}", file=sys.stderr)
            return EXIT_USAGE
        # netsh redirected by PowerShell 5.1 comes out as UTF-16 with a BOM; cmd.exe's is the OEM code page.
        text = raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode("utf-8", "replace")
        what = f"--netsh-file {args.netsh_file}"
    scan = asyncio.run(_scan(rig, text, what))
    if args.json:
        print_json(scan.to_json())
    else:
        print("\n".join(render(scan)))
    if scan.any_conflict:
        return EXIT_FINDING
    return EXIT_REFUSED if scan.any_unknown else EXIT_OK
