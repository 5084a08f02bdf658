"""`c` on the results screen: paired per-route ΔDS of two sides run on the same routes (UE4 vs UE5, model A
vs model B), as a bar per route, with σ_d, the MDE and the flips listed first."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ops.results.paired import Comparison
from ops.results.textplot import FULL, delta_plot

STYLE = {"up": "green", "down": "red", "flip": "bold yellow", "flat": "dim"}


def plot_text(cmp: Comparison) -> Text:
    plot = delta_plot(cmp)
    t = Text()
    for i, line in enumerate(plot.lines):
        for ch, kind in zip(line, plot.kinds):
            t.append(ch, style=STYLE[kind] if ch == FULL else "dim")
        if i < len(plot.lines) - 1:
            t.append("\n")
    return t


def summary_text(cmp: Comparison, a: str, b: str) -> Text:
    def f(v: float | None, spec: str = ".2f") -> str:
        return "n/a" if v is None else format(v, spec)
    t = Text(f"{b} − {a}: ", style="bold")
    t.append(f"n {cmp.n}  mean Δ {f(cmp.mean_delta, '+.2f')}  σ_d {f(cmp.sd_delta)}  MDE {f(cmp.mde)}  → ")
    t.append(cmp.verdict, style="bold green" if cmp.significant else "bold")
    t.append("\nbars: one per shared route in id order (green up, red down, yellow flip); dots: ±MDE", style="dim")
    if cmp.flips:
        t.append(f"\nflips ({len(cmp.flips)}): ", style="bold yellow")
        t.append(", ".join(f"{p.route_id} {p.status_a}→{p.status_b} ({p.delta:+.0f})" for p in cmp.flips))
    return t


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "close", "Back")]   # q quits, from any screen (the app's binding)
    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    #compare-box { width: 96%; height: auto; max-height: 90%; border: round $accent; background: $surface;
                   padding: 0 1; }
    #compare-plot-scroll { height: auto; }
    #compare-plot { width: auto; }
    """

    def __init__(self, cmp: Comparison, label_a: str, label_b: str) -> None:
        super().__init__()
        self.cmp = cmp
        self.label_a = label_a
        self.label_b = label_b

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare-box"):
            yield Static(summary_text(self.cmp, self.label_a, self.label_b), id="compare-summary")
            with HorizontalScroll(id="compare-plot-scroll"):
                yield Static(plot_text(self.cmp), id="compare-plot")
            yield Static(Text("Esc closes", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#compare-box").border_title = f"compare · {self.label_a} → {self.label_b}"

    def action_close(self) -> None:
        self.dismiss(None)
