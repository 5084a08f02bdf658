"""Signal a pid only if it is still the same process (create time), on a Linux host; print one JSON line.

The check and the signal run on the host itself, so no network round trip sits between them.
"""
import json
import os
import signal
import sys


def create_time(pid: int) -> float:
    with open("/proc/stat") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2:].split()
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return "?"
    fields = raw[raw.rfind(b")") + 2:].split()
    letter = fields[0].decode("ascii", "replace")
    # A zombie leader whose other threads still run (ps: Zl) has not exited: they hold its sockets.
    return "Zl" if letter == "Z" and int(fields[17]) > 1 else letter


def cmdline(pid: int) -> list:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]


def main() -> int:
    pid, expected, signame = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    # argv 4 (optional): the planned argv as JSON, decoded as proctable.py decodes it. exec() keeps the
    # pid and the start time: a process that exec'd into another program is not the planned one.
    argv = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    try:
        actual = create_time(pid)
    except (FileNotFoundError, ProcessLookupError):
        print(json.dumps({"outcome": "gone"}))
        return 0
    if abs(actual - expected) > 0.05:
        print(json.dumps({"outcome": "changed", "create_time": actual}))
        return 0
    if argv is not None:
        try:
            now = cmdline(pid)
        except (FileNotFoundError, ProcessLookupError):
            print(json.dumps({"outcome": "gone"}))
            return 0
        except PermissionError as e:
            print(json.dumps({"outcome": "error", "error": str(e)}))
            return 0
        # A zombie's cmdline reads empty: Z has exited (not yet reaped); Zl is the planned process, exiting.
        st = state(pid) if now != argv else ""
        if st == "Z":
            print(json.dumps({"outcome": "gone"}))
            return 0
        if now != argv and st != "Zl":
            print(json.dumps({"outcome": "changed", "detail": "pid {} now runs {!r} (exec'd since the plan)".format(
                pid, " ".join(now)[:160])}))
            return 0
    try:
        os.kill(pid, getattr(signal, signame))
    except ProcessLookupError:
        print(json.dumps({"outcome": "gone"}))
        return 0
    except PermissionError as e:
        print(json.dumps({"outcome": "error", "error": str(e)}))
        return 0
    print(json.dumps({"outcome": "sent"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
