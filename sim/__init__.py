"""The simulated rig: real processes that behave like a CARLA rig at the interfaces the console uses.

    rig.py            up / down / inject / start_evaluator / launch_server (the API of `sim ...`)
    install.py        writes D/bin (the fake tools), D/sim (their config), D/work/<side>
    layout.py         every path under D, in one place
    fake_launcher.py  CarlaUE4.sh            -> spawns the shipping server, waits, passes its rc on
    fake_server.py    CarlaUE4-Linux-Shipping: msgpack-rpc `version`, ports N..N+2, GPU fate by adapter
    fake_nvsmi.py     nvidia-smi --query-* CSV from the VRAM ledger (ledger.py)
    fake_netsh.py     netsh int ipv4 show excludedportrange
    fake_conda.py     conda run (a wrapper that does not forward SIGTERM) / conda env list --json
    fake_evaluator.py leaderboard_evaluator.py (Bench2Drive argparse, checkpoint, resume: b2d.py)
    rpc.py   the wire format (msgpack); procs.py  (pid, create_time) records and stopping;
    ports.py          free port blocks; routes.py  a Bench2Drive-shaped routes XML

Kept import-light on purpose: the fake tools import only what they need, so each call starts fast.
"""
