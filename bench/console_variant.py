"""Variants of the console, for attributing the idle cost (bench/idle.py --variant ...).

    python bench/console_variant.py MODE RIG_YAML

MODE:
  no-poll   the TUI with its poll loop off: panes drawn once, the 1 s tick only (Textual's own floor)
  ops-only  no UI: the TUI's poll path (LiveBackend.probe per side, log tail included, 1 s apart after
            each poll ends) — the ops share of the cost
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def ops_only(rig_yaml: str) -> None:
    from console.tui.backend import LiveBackend
    from ops.config import load_config
    backend = LiveBackend(load_config(rig_yaml))
    await backend.start()

    async def side_loop(side: str) -> None:
        while True:
            await backend.probe(side, None)
            await asyncio.sleep(backend.rig.poll_s)

    try:
        for s in backend.rig.sides:
            await backend.probe(s, None)
        print("ops-only: first polls done", flush=True)
        await asyncio.gather(*(side_loop(s) for s in backend.rig.sides))
    finally:
        await backend.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["no-poll", "ops-only"])
    ap.add_argument("rig")
    a = ap.parse_args()
    if a.mode == "ops-only":
        try:
            asyncio.run(ops_only(a.rig))
        except KeyboardInterrupt:
            pass
        return 0
    from console.tui import backend as tui
    from console.tui.app import ConsoleApp
    from ops.config import load_config
    return int(ConsoleApp(tui.LiveBackend(load_config(a.rig)), poll=False).run() or 0)


if __name__ == "__main__":
    sys.exit(main())
