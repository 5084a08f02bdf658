"""Free memory and disk space as the hosts' own tools print them: a value, or the error in words."""
from __future__ import annotations

import json


def parse_df(text: str) -> dict[str, tuple[str, int, int]]:
    """`df -Pk -- PATH...` rows (POSIX format) by the order given: mount, free MiB, total MiB."""
    rows = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[1].isdigit() and parts[3].isdigit():
            rows.append((" ".join(parts[5:]), int(parts[3]) // 1024, int(parts[1]) // 1024))
    return {str(i): r for i, r in enumerate(rows)}


def parse_meminfo(text: str) -> tuple[int, int] | str:
    vals = {}
    for line in text.splitlines():
        k, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            vals[k.strip()] = int(parts[0]) // 1024
    if "MemAvailable" not in vals or "MemTotal" not in vals:
        return f"no MemAvailable/MemTotal in /proc/meminfo: {text[:200]!r}"
    return vals["MemAvailable"], vals["MemTotal"]


def parse_windows_memory(text: str) -> tuple[int, int] | str:
    """Win32_OperatingSystem counts in KiB: FreePhysicalMemory, TotalVisibleMemorySize."""
    try:
        d = json.loads(text)
        if isinstance(d, list):
            d = d[0]
        return int(d["FreePhysicalMemory"]) // 1024, int(d["TotalVisibleMemorySize"]) // 1024
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return f"unparseable Win32_OperatingSystem ({type(e).__name__}: {e}): {text[:200]!r}"
