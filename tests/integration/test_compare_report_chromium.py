"""The compare report opens in real headless Chromium and its screenshot shows the ΔDS plot."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from PIL import Image

from console.cli.main import main
from ops.results.report_html import DOWN, FLIP, UP

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _checkpoint(rows: list[tuple[str, str, float]]) -> dict:
    return {"_checkpoint": {"progress": [len(rows), len(rows)], "records": [
        {"index": i, "route_id": f"RouteScenario_{rid}_rep0", "status": st, "infractions": {},
         "scores": {"score_route": 100.0, "score_penalty": 1.0, "score_composed": ds}, "meta": {}}
        for i, (rid, st, ds) in enumerate(rows)]}, "entry_status": "Finished"}


def _screenshot(html: Path, png: Path, profile: Path) -> None:
    """One headless Chromium run in its own session; on a timeout its whole group is killed."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1000,700", html.as_uri()]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        # Chromium's helpers share its session: none may outlive the test.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert png.exists(), err.decode(errors="replace")[-2000:]


def test_report_plot_renders_in_headless_chromium(tmp_path: Path, capsys):
    assert CHROMIUM is not None, "needs Debian's chromium (.ci/run installs it)"
    a = [(str(i), "Completed", 60.0) for i in range(1, 21)]
    b = [(str(i), "Completed" if i != 7 else "Failed - Agent got blocked", 60.0 + (i % 5 - 2) * 12)
         for i in range(1, 21)]
    (tmp_path / "a.json").write_text(json.dumps(_checkpoint(a)))
    (tmp_path / "b.json").write_text(json.dumps(_checkpoint(b)))
    report = tmp_path / "report.html"
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--report", str(report)]) == 0
    png = tmp_path / "shot.png"
    _screenshot(report, png, tmp_path / "profile")
    img = Image.open(png).convert("RGB")
    counts = {name: 0 for name in ("up", "down", "flip")}
    wanted = {"up": _rgb(UP), "down": _rgb(DOWN), "flip": _rgb(FLIP)}
    for n, pixel in img.getcolors(maxcolors=1 << 24) or []:
        for name, colour in wanted.items():
            if all(abs(p - c) <= 6 for p, c in zip(pixel, colour)):
                counts[name] += n
    # Bars of gains and losses, and the flip's outline, are on screen (not just in the file).
    assert counts["up"] > 500 and counts["down"] > 500 and counts["flip"] > 50, counts
