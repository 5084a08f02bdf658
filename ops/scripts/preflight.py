"""Gather a side's preflight facts inside its pinned env; print one JSON line per stage (flushed).

Run as `conda run -n ENV --no-capture-output --cwd CWD python preflight.py --script S --agent A ...`:
the env, cwd and PYTHONPATH are the evaluator's own, so what imports here is what the evaluator will
import. This file only measures; ops/probes/preflight.py turns the facts into verdicts. One line per stage,
flushed at once, so that a stage that hangs (an agent import stuck on a network mount) still leaves the
stages before it readable when the console's timeout stops us.

Never constructs the agent, never touches the GPU beyond torch's device queries.
"""
import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
import traceback

WATCHED_DISTS = ("carla", "carla-ue5-api")


def emit(stage, **facts):
    facts["stage"] = stage
    sys.stdout.write(json.dumps(facts, default=str) + "\n")
    sys.stdout.flush()


def error_facts(e):
    """The exception as the operator needs it: type, message, the missing module's exact name, and where
    it was raised (the last frame: the file that did the failing import)."""
    frames = [f"{f.filename}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith("<") and f.filename != __file__]
    return {"error": f"{type(e).__name__}: {e}", "error_type": type(e).__name__,
            "missing": getattr(e, "name", None) if isinstance(e, ImportError) else None,
            "where": frames[-1] if frames else None, "chain": frames[-8:]}


def norm(name):
    return name.lower().replace("_", "-").replace(".", "-")


def dists():
    found = []
    for d in importlib.metadata.distributions():
        try:
            name = d.metadata["Name"] or ""
        except Exception:  # a broken METADATA file: skip it, it cannot be one of ours by name
            continue
        if norm(name) in WATCHED_DISTS:
            found.append({"name": norm(name), "version": d.version, "location": str(getattr(d, "_path", ""))})
    return found


def stage_carla(a):
    t0 = time.perf_counter()
    facts = {"dists": dists()}
    try:
        import carla  # noqa: PLC0415 - the import is what we measure
    except BaseException as e:  # a broken C++ extension raises anything, even SystemExit
        facts.update(error_facts(e), ok=False)
        emit("carla", **facts, took_ms=(time.perf_counter() - t0) * 1e3)
        return
    facts.update(ok=True, file=getattr(carla, "__file__", None))
    try:
        client = carla.Client(a.host, a.port)
        client.set_timeout(a.rpc_timeout)
        facts["client_version"] = client.get_client_version()
        if a.port:
            try:
                facts["server_version"] = client.get_server_version()
            except Exception as e:  # carla raises plain RuntimeError: refused, silent, dead all look alike
                facts["server_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:
        facts["client_error"] = f"{type(e).__name__}: {e}"
    emit("carla", **facts, took_ms=(time.perf_counter() - t0) * 1e3)


def evaluator_path(a):
    """sys.path as `python SCRIPT` has it: the script's folder first, then PYTHONPATH and the env's
    site-packages (already ours: same interpreter, same environment). Our own folder goes."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path[1:] if os.path.abspath(p or ".") != here]
    sys.path[:] = [os.path.dirname(os.path.abspath(a.script)), *rest]


def spec_facts(name):
    try:
        spec = importlib.util.find_spec(name)
    except BaseException as e:
        return {"module": name, "found": False, **error_facts(e)}
    if spec is None:
        return {"module": name, "found": False, "error": f"ModuleNotFoundError: No module named '{name}'",
                "missing": name}
    locations = list(spec.submodule_search_locations or [])
    return {"module": name, "found": True, "origin": spec.origin if spec.has_location else None,
            "locations": locations}


def loaded_files(prefixes):
    """Every module of these packages the imports so far loaded, with its file (two trees show here)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] in prefixes:
            f = getattr(mod, "__file__", None)
            if f:
                out[name] = f
    return out


def stage_modules(a):
    t0 = time.perf_counter()
    emit("modules", specs=[spec_facts("leaderboard"), spec_facts("srunner")],
         sys_path=sys.path[:12], took_ms=(time.perf_counter() - t0) * 1e3)


def stage_agent(a):
    """The evaluator's own way: sys.path.insert(0, dirname(agent)); import_module(basename before '.')."""
    t0 = time.perf_counter()
    name = os.path.basename(a.agent).split(".")[0]
    sys.path.insert(0, os.path.dirname(a.agent))
    facts = {"module": name, "agent": a.agent}
    try:
        mod = importlib.import_module(name)
    except BaseException as e:
        facts.update(error_facts(e), ok=False)
    else:
        facts.update(ok=True, file=getattr(mod, "__file__", None),
                     entry_point=callable(getattr(mod, "get_entry_point", None)))
    facts["loaded"] = loaded_files(("leaderboard", "srunner", "team_code"))
    emit("agent", **facts, took_ms=(time.perf_counter() - t0) * 1e3)


def stage_torch(a):
    t0 = time.perf_counter()
    facts: dict = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        emit("torch", installed=False, **facts, took_ms=(time.perf_counter() - t0) * 1e3)
        return
    try:
        import torch  # noqa: PLC0415
        facts.update(installed=True, version=getattr(torch, "__version__", None),
                     cuda_build=getattr(getattr(torch, "version", None), "cuda", None))
        facts["cuda_available"] = bool(torch.cuda.is_available())
        devices = []
        if facts["cuda_available"]:
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                uuid = getattr(props, "uuid", None)
                devices.append({"index": i, "name": torch.cuda.get_device_name(i),
                                "uuid": None if uuid is None else _uuid_text(uuid),
                                "total_mb": int(getattr(props, "total_memory", 0) // 2**20) or None})
        facts["devices"] = devices
    except BaseException as e:
        facts.update(error_facts(e), installed=True)
    emit("torch", **facts, took_ms=(time.perf_counter() - t0) * 1e3)


def _uuid_text(u):
    s = str(u)
    return s if s.startswith(("GPU-", "MIG-")) else f"GPU-{s}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True, help="the evaluator script (its folder leads sys.path)")
    ap.add_argument("--agent", required=True, help="the agent file as the evaluator's --agent gives it")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="the server's RPC port (0: do not ask it)")
    ap.add_argument("--rpc-timeout", type=float, default=3.0)
    a = ap.parse_args()
    emit("python", executable=sys.executable, version=sys.version.split()[0], cwd=os.getcwd(),
         pythonpath=os.environ.get("PYTHONPATH"), prefix=sys.prefix)
    evaluator_path(a)
    stage_carla(a)
    stage_modules(a)
    stage_agent(a)
    stage_torch(a)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
