"""Print this Linux host's process table as JSON (run remotely by the console; stdlib only)."""
import json
import os

CLK = os.sysconf("SC_CLK_TCK")


def main() -> None:
    with open("/proc/stat") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
            r = raw.rfind(b")")
            fields = raw[r + 2:].split()
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]
            except PermissionError:
                cmd = None
            state = fields[0].decode()
            if state == "Z" and int(fields[17]) > 1:   # a zombie leader whose threads run on: not exited
                state = "Zl"
            rows.append({"pid": int(name), "ppid": int(fields[1]), "state": state,
                         "create_time": boot + int(fields[19]) / CLK, "cmdline": cmd,
                         "name": raw[raw.find(b"(") + 1:r].decode("utf-8", "replace")})
        except (FileNotFoundError, ProcessLookupError):
            continue
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
