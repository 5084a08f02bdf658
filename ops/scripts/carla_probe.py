"""Ask a CARLA server its version with the real `carla` client; print one JSON line.

Run inside the side's pinned conda env (conda run -n ENV ... python carla_probe.py --host H --port N),
because that env is where the matching `carla` wheel lives. An ImportError is reported, never hidden:
the console turns it into UNKNOWN, not DEAD.
"""
import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=3.0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    try:
        import carla  # noqa: PLC0415 - the import itself is what we probe
    except Exception as e:  # ImportError, or a broken wheel raising anything else
        print(json.dumps({"ok": False, "stage": "import", "error": f"import carla failed: {type(e).__name__}: {e}",
                          "python": sys.executable}))
        return 0
    try:
        client = carla.Client(a.host, a.port)
        client.set_timeout(a.timeout)
        version = client.get_server_version()
    except Exception as e:  # carla raises plain RuntimeError for refused, silent or dead servers
        print(json.dumps({"ok": False, "stage": "rpc", "error": f"{type(e).__name__}: {e}",
                          "took_ms": (time.perf_counter() - t0) * 1e3}))
        return 0
    print(json.dumps({"ok": True, "version": version, "client": getattr(carla, "__version__", None),
                      "took_ms": (time.perf_counter() - t0) * 1e3}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
