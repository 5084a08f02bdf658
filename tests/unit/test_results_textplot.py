"""The terminal ΔDS plot: bar heights, the ±MDE dots, the flip marks (the hand case of test_results_compare)."""
from __future__ import annotations

from ops.results.paired import Comparison, PairedRoute
from ops.results.textplot import delta_plot


def test_hand_case():
    routes = (PairedRoute("1", "Completed", "Completed", 80.0, 90.0),          # +10
              PairedRoute("2", "Completed", "Failed - Agent timed out", 100.0, 80.0),   # -20, flip
              PairedRoute("3", "Failed", "Completed", 20.0, 50.0),           # +30, flip
              PairedRoute("4", "Perfect", "Perfect", 100.0, 100.0))          # 0
    plot = delta_plot(Comparison(routes, (), ()), half_height=5)
    # scale 30 (the largest |Δ|; MDE 29.16 is smaller); heights round(|Δ|/30*5): 2, 3, 5, 0; band round(4.86) = 5.
    assert plot.scale == 30.0 and plot.kinds == ("up", "flip", "flip", "flat")
    assert plot.lines == (
        "··█·",
        "··█·",
        "··█·",
        "█·█·",
        "█·█·",
        "────",
        "·█··",
        "·█··",
        "·█··",
        "····",
        "····",
    )
