"""The fake `netsh`: `netsh int ipv4 show excludedportrange protocol=tcp` in the real layout.

Format (tests/data/netsh_sample_otel_collector_pr10839.txt): a title line, a blank line, the column
header and a dashed line (both with trailing blanks), rows of two right-aligned numbers where an
administered row ends in `*`, a blank line, the footer, a blank line. Rows come from
D/sim/excluded.json: `[[start, end, administered], ...]` (tcp), or `{"tcp": [...], "udp": [...]}`.
D/sim/netsh.mode: ok | fail | hang (interop calls do hang; the console must time out).
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

from sim.layout import SimLayout, read_json, read_mode

MODES = ("ok", "fail", "hang")
DEFAULT_EXCLUDED: list[list] = [[80, 80, False], [5986, 5986, False]]


def render_table(protocol: str, ranges: Sequence[Sequence]) -> str:
    lines = [f"Protocol {protocol} Port Exclusion Ranges", "",
             "Start Port    End Port      ",
             "----------    --------      "]
    for start, end, administered in ranges:
        lines.append(f"{int(start):>10}    {int(end):>8}     {'*' if administered else ' '}")
    lines += ["", "* - Administered port exclusions.", ""]
    return "".join(line + "\n" for line in lines)


def load_ranges(layout: SimLayout, protocol: str) -> list[list]:
    data = read_json(layout.excluded_json, DEFAULT_EXCLUDED)
    if isinstance(data, dict):
        data = data.get(protocol, [])
    elif protocol != "tcp":
        data = []
    return sorted(([int(s), int(e), bool(a)] for s, e, a in data), key=lambda r: (r[0], r[1]))


def _protocol(argv: list[str]) -> str | None:
    """The protocol of a well-formed `int ipv4 show excludedportrange protocol=X`, else None.

    netsh is case-insensitive and accepts unambiguous abbreviations of its keywords.
    """
    toks = [t.lower() for t in argv]
    if len(toks) < 5 or len(toks) > 6:
        return None
    ctx, family, verb, what, *rest = toks
    if not ("interface".startswith(ctx) and len(ctx) >= 3) or family != "ipv4":
        return None
    if not ("show".startswith(verb) and len(verb) >= 2):
        return None
    if not ("excludedportrange".startswith(what) and len(what) >= 8):
        return None
    proto = None
    for tok in rest:
        key, eq, value = tok.partition("=")
        if eq and key == "protocol":
            proto = value
        elif eq and key == "store" and value in ("active", "persistent"):
            continue
        elif not eq and tok in ("tcp", "udp"):
            proto = tok
        else:
            return None
    return proto if proto in ("tcp", "udp") else None


def main(argv: list[str], sim_dir: str | os.PathLike[str]) -> int:
    layout = SimLayout.of(sim_dir)
    try:
        mode = read_mode(layout.netsh_mode, MODES)
    except ValueError as exc:
        print(f"[sim] {exc}", file=sys.stderr)
        return 1
    if mode == "hang":
        from sim.procs import register_self
        register_self(layout, "netsh")
        threading.Event().wait()
    proto = _protocol(argv)
    if mode == "fail" or proto is None:
        print(f"The following command was not found: {' '.join(argv)}.")
        return 1
    sys.stdout.write(render_table(proto, load_ranges(layout, proto)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--sim-dir":
        sys.exit(main(sys.argv[3:], sys.argv[2]))
    sys.exit("usage: fake_netsh.py --sim-dir D netsh-args...")
