"""A static HTML report of a paired comparison: summary, flips, and an inline SVG of per-route ΔDS.

One self-contained file: no script, no stylesheet or font fetched, nothing that needs a network, so it
opens the same from a mail attachment or an air-gapped cluster. Bars: green up, red down; a flip
(completed in one run, failed in the other) gets an amber outline, since those dominate closed-loop noise.
"""
from __future__ import annotations

import html

from ops.results.paired import Comparison

UP = "#2e7d32"
DOWN = "#c62828"
FLIP = "#f9a825"
ZERO = "#9e9e9e"
BAND = "#e3f2fd"   # ±MDE band around zero

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 900, 320, 56, 16, 24, 28


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "n/a" if v is None else format(v, fmt)


def svg_plot(cmp: Comparison) -> str:
    """Per-route ΔDS bars in route-id order, with the ±MDE band and the mean line."""
    routes = sorted(cmp.routes, key=lambda r: (int(r.route_id) if r.route_id.isdigit() else 1 << 62, r.route_id))
    span = max([abs(r.delta) for r in routes] + [cmp.mde or 0.0, 1.0])
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    mid = PAD_T + plot_h / 2

    def y(v: float) -> float:
        return mid - v / span * (plot_h / 2)

    parts = [f'<svg id="delta-plot" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'viewBox="0 0 {W} {H}" role="img" aria-label="per-route delta DS">',
             f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>']
    if cmp.mde is not None:
        parts.append(f'<rect x="{PAD_L}" y="{y(cmp.mde):.1f}" width="{plot_w}" height="{y(-cmp.mde) - y(cmp.mde):.1f}" '
                     f'fill="{BAND}"><title>±MDE {cmp.mde:.2f}</title></rect>')
    for tick in (-span, -span / 2, 0.0, span / 2, span):
        parts.append(f'<text x="{PAD_L - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end" '
                     f'font-family="sans-serif">{tick:+.0f}</text>')
    parts.append(f'<line x1="{PAD_L}" y1="{mid:.1f}" x2="{W - PAD_R}" y2="{mid:.1f}" stroke="{ZERO}" stroke-width="1"/>')
    n = max(len(routes), 1)
    slot = plot_w / n
    bar = max(slot * 0.8, 1.0)
    for i, r in enumerate(routes):
        x = PAD_L + i * slot + (slot - bar) / 2
        top, bottom = sorted((y(r.delta), mid))
        height = max(bottom - top, 1.0)
        colour = UP if r.delta > 0 else DOWN if r.delta < 0 else ZERO
        stroke = f' stroke="{FLIP}" stroke-width="3"' if r.flip else ""
        parts.append(f'<rect class="bar{" flip" if r.flip else ""}" x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                     f'height="{height:.1f}" fill="{colour}"{stroke}><title>{html.escape(r.route_id)}: '
                     f'{r.ds_a:.1f} → {r.ds_b:.1f} (Δ {r.delta:+.1f}){" flip" if r.flip else ""}</title></rect>')
    if cmp.mean_delta is not None:
        parts.append(f'<line x1="{PAD_L}" y1="{y(cmp.mean_delta):.1f}" x2="{W - PAD_R}" y2="{y(cmp.mean_delta):.1f}" '
                     'stroke="#000000" stroke-dasharray="6 4" stroke-width="1.5"/>')
    parts.append(f'<text x="{PAD_L}" y="{H - 8}" font-size="11" font-family="sans-serif">routes in id order '
                 f'(n={cmp.n}); dashed: mean Δ; shaded: ±MDE; amber outline: flip</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render(cmp: Comparison, label_a: str, label_b: str) -> str:
    esc = html.escape
    flips = "".join(f"<tr><td>{esc(r.route_id)}</td><td>{esc(r.status_a)}</td><td>{esc(r.status_b)}</td>"
                    f"<td>{r.ds_a:.1f}</td><td>{r.ds_b:.1f}</td><td>{r.delta:+.1f}</td></tr>" for r in cmp.flips)
    rows = "".join(f"<tr{' class=flip' if r.flip else ''}><td>{esc(r.route_id)}</td><td>{esc(r.status_a)}</td>"
                   f"<td>{esc(r.status_b)}</td><td>{r.ds_a:.1f}</td><td>{r.ds_b:.1f}</td><td>{r.delta:+.1f}</td></tr>"
                   for r in cmp.routes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>carla-console compare: {esc(label_a)} vs {esc(label_b)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #212121; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: right; }}
tr.flip td {{ background: #fff8e1; }}
.verdict {{ font-size: 1.2em; font-weight: bold; }}
</style></head><body>
<h1>Paired comparison</h1>
<p>A: <code>{esc(label_a)}</code><br>B: <code>{esc(label_b)}</code></p>
<p class="verdict">mean ΔDS (B − A) {_num(cmp.mean_delta, '+.2f')} — {esc(cmp.verdict)}</p>
<table><tr><th>n (shared routes)</th><th>mean Δ</th><th>σ_d</th><th>MDE (α 0.05, power 0.8)</th><th>flips</th>
<th>only in A</th><th>only in B</th></tr>
<tr><td>{cmp.n}</td><td>{_num(cmp.mean_delta, '+.2f')}</td><td>{_num(cmp.sd_delta)}</td><td>{_num(cmp.mde)}</td>
<td>{len(cmp.flips)}</td><td>{len(cmp.only_a)}</td><td>{len(cmp.only_b)}</td></tr></table>
<h2>Per-route ΔDS</h2>
{svg_plot(cmp)}
<h2>Flips (completed ↔ failed)</h2>
<table><tr><th>route</th><th>A status</th><th>B status</th><th>A DS</th><th>B DS</th><th>Δ</th></tr>{flips}</table>
<h2>All shared routes (flips first, then by |Δ|)</h2>
<table><tr><th>route</th><th>A status</th><th>B status</th><th>A DS</th><th>B DS</th><th>Δ</th></tr>{rows}</table>
</body></html>
"""
