"""The fake `CarlaUE4.sh`: starts the shipping server as a child and waits for it, like the real script.

The real launcher is `#!/bin/sh ... "$ROOT/CarlaUE4/Binaries/Linux/CarlaUE4-Linux-Shipping" CarlaUE4 "$@"`.
What matters to the console: the pid you get when you launch is the *launcher's*; the server is its
child with the same `-carla-rpc-port=N` token; SIGTERM to the launcher kills only the launcher (sh
does not forward it) and leaves the server running; the launcher's exit code is the server's, and
128+signal when the server died by a signal (sh's convention).

The shipping "binary" is D/bin/CarlaUE4-Linux-Shipping, a symlink to the Python interpreter. Executed
as `[D/bin/CarlaUE4-Linux-Shipping, CarlaUE4, args...]` from cwd D/bin, Python runs the package dir
D/bin/CarlaUE4/ (its __main__.py starts sim.fake_server), so the process table shows exactly the
real argv: argv[0] the shipping path, argv[1] `CarlaUE4`, then the arguments.
"""
from __future__ import annotations

import os
import subprocess
import sys

from sim.layout import PROJECT_NAME, SimLayout


def main(argv: list[str], sim_dir: str | os.PathLike[str]) -> int:
    from sim.procs import register_self

    layout = SimLayout.of(sim_dir)
    register_self(layout, "launcher")
    child = subprocess.Popen([str(layout.shipping), PROJECT_NAME, *argv], cwd=layout.bin)
    rc = child.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--sim-dir":
        sys.exit(main(sys.argv[3:], sys.argv[2]))
    sys.exit("usage: fake_launcher.py --sim-dir D args...")
