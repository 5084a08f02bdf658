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


def main() -> int:
    pid, expected, signame = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    try:
        actual = create_time(pid)
    except (FileNotFoundError, ProcessLookupError):
        print(json.dumps({"outcome": "gone"}))
        return 0
    if abs(actual - expected) > 0.05:
        print(json.dumps({"outcome": "changed", "create_time": actual}))
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
