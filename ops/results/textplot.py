"""Per-route ΔDS as a text bar chart (one column per route, in route-id order) for the terminal.

Rows above the zero line are gains, below are losses; empty cells inside ±MDE are dotted, so a bar that
stays in the dots is within noise. Each column also says what kind it is (up, down, flat, flip) so the
caller can colour it; a flip (completed in one run, failed in the other) is marked whatever its Δ.
"""
from __future__ import annotations

from dataclasses import dataclass

from ops.results.paired import Comparison, PairedRoute

FULL, BAND, EMPTY, ZERO = "█", "·", " ", "─"


@dataclass(frozen=True)
class TextPlot:
    lines: tuple[str, ...]          # top to bottom; the middle one is the zero line
    kinds: tuple[str, ...]          # per column: "up" | "down" | "flat" | "flip"
    routes: tuple[PairedRoute, ...]  # per column
    scale: float                    # |Δ| of a full-height bar


def _order(r: PairedRoute) -> tuple[int, str]:
    return (int(r.route_id), "") if r.route_id.isdigit() else (1 << 62, r.route_id)


def delta_plot(cmp: Comparison, half_height: int = 5) -> TextPlot:
    routes = tuple(sorted(cmp.routes, key=_order))
    scale = max([abs(r.delta) for r in routes] + [cmp.mde or 0.0, 1.0])
    band = 0 if cmp.mde is None else round(cmp.mde / scale * half_height)
    levels = [0 if r.delta == 0 else max(1, round(abs(r.delta) / scale * half_height)) for r in routes]
    lines: list[str] = []
    for level in range(half_height, 0, -1):       # gains, top row first
        lines.append("".join(FULL if r.delta > 0 and k >= level else BAND if level <= band else EMPTY
                             for r, k in zip(routes, levels)))
    lines.append(ZERO * len(routes))
    for level in range(1, half_height + 1):        # losses
        lines.append("".join(FULL if r.delta < 0 and k >= level else BAND if level <= band else EMPTY
                             for r, k in zip(routes, levels)))
    kinds = tuple("flip" if r.flip else "up" if r.delta > 0 else "down" if r.delta < 0 else "flat" for r in routes)
    return TextPlot(lines=tuple(lines), kinds=kinds, routes=routes, scale=scale)
