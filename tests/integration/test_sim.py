"""The simulated rig (sim): real processes behaving like the originals at their interfaces.

One module-wide rig (two servers, no evaluators) serves most tests; evaluators are started per test
against it. Every process is reaped by pid: the rig by `down()` (which must leave none of its
recorded pids alive), ad-hoc processes by the `spawned` fixture.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import psutil
import pytest
import yaml

from sim import b2d, fake_evaluator, fake_nvsmi, rig, rpc
from sim.fake_netsh import render_table
from sim.layout import SimLayout
from sim.ledger import load_model
from sim.ports import pick
from sim.procs import all_records, identify, started, wait_gone, wait_until

DATA = Path(__file__).resolve().parents[1] / "data"
PY = sys.executable


# --------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """A rig with two rendering servers (adapter 0 -> 6000 MiB each on GPU 0), no evaluators."""
    d = tmp_path_factory.mktemp("rig")
    rig.up(d, start_evaluators=False, routes=3, route_s=0.3, tick_s=0.05, eval_timeout_s=2)
    layout = SimLayout.of(d)
    sides = json.loads(layout.sides_json.read_text())["sides"]
    # Both servers book their VRAM a moment after start: settled before any test counts the ledger.
    assert wait_until(lambda: len(ledger_pids(layout)) == 2, 60), "the rig's two servers never booked VRAM"
    yield layout, sides
    records = all_records(layout)
    rig.down(d)
    assert [r for r in records if identify(r) is not None] == []


class Spawned:
    """Processes a test starts directly; at teardown their trees are killed by pid."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.extra: list[psutil.Process] = []

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, **kw)
        self.procs.append(proc)
        return proc

    def adopt(self, proc: psutil.Process) -> psutil.Process:
        self.extra.append(proc)
        return proc

    def cleanup(self) -> None:
        targets: list[psutil.Process] = []
        for p in self.procs:
            try:
                ps = psutil.Process(p.pid)
                targets += [ps, *ps.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        targets += self.extra
        for t in targets:
            try:
                t.kill()
            except psutil.NoSuchProcess:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # Not psutil.wait_procs: an orphan's zombie lingers until PID 1 reaps it; gone() counts it exited.
        assert wait_gone(targets, 3) == []


@pytest.fixture
def spawned():
    s = Spawned()
    yield s
    s.cleanup()


def tool(layout: SimLayout, name: str, *args: str, timeout: float = 10, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(layout.bin / name), *args], capture_output=True, text=True, timeout=timeout, **kw)


def ledger_pids(layout: SimLayout) -> set[int]:
    return {int(p.stem) for p in layout.gpu_ledger.glob("*.json")}


# ------------------------------------------------------------------------------------------------ msgpack

def test_rpc_request_is_what_the_carla_client_sends():
    assert msgpack.unpackb(rpc.request(7, "version", [[False]])) == [0, 7, "version", [[False]]]
    assert msgpack.unpackb(rpc.response(7, rpc.ok("0.9.15"))) == [1, 7, None, [[1, "0.9.15"]]]


# ------------------------------------------------------------------------------------------------ server

def test_real_carla_client_reads_version(sim):
    import carla

    _, sides = sim
    for s in sides.values():
        client = carla.Client("127.0.0.1", s["rpc_port"])
        client.set_timeout(2.0)
        assert client.get_server_version() == "0.9.15"


def test_rpc_keepalive_concurrent_unknown_method(sim):
    _, sides = sim
    port = sides["A"]["rpc_port"]
    conns = [rpc.Connection("127.0.0.1", port, timeout=2) for _ in range(6)]
    try:
        for _ in range(2):                  # several calls per connection, all connections open
            for c in conns:
                assert c.call("version").result == [[1, "0.9.15"]]
        reply = conns[0].call("get_world", [[False]])
        assert reply.error is None and reply.result == [[0, ["unknown method get_world"]]]
        with pytest.raises(RuntimeError, match="unknown method"):
            _ = reply.value
    finally:
        for c in conns:
            c.close()
    for extra in (port + 1, port + 2):      # streaming and secondary ports accept and hold
        with socket.create_connection(("127.0.0.1", extra), timeout=2) as s:
            s.sendall(b"hello")


def test_launcher_shipping_chain(sim):
    layout, sides = sim
    port = sides["A"]["rpc_port"]
    token = f"-carla-rpc-port={port}"
    launcher = next(r for r in started(layout) if r.role == "launcher" and r.side == "A")
    lp = identify(launcher)
    assert lp is not None and token in lp.cmdline() and lp.cmdline()[1] == str(layout.launcher)
    (child,) = lp.children()
    cmd = child.cmdline()
    assert cmd[0] == str(layout.shipping) and cmd[1] == "CarlaUE4"
    assert token in cmd and "-graphicsadapter=0" in cmd and "-RenderOffScreen" in cmd
    assert child.name() == "CarlaUE4-Linux-Shipping" and child.pid != lp.pid
    assert [p.pid for p in rig.shipping_processes(layout.root, port)] == [child.pid]
    # The token is matched whole: a port that is a prefix of N finds nothing.
    assert rig.shipping_processes(layout.root, int(str(port)[:-1])) == []


def test_nvidia_smi_formats_from_the_ledger(sim):
    layout, _ = sim
    assert wait_until(lambda: len(ledger_pids(layout)) == 2, 5)
    servers = sorted(r.pid for r in started(layout) if r.role == "server")
    q = "--query-gpu=index,name,memory.used,memory.total"
    assert tool(layout, "nvidia-smi", q, "--format=csv,noheader,nounits").stdout == "0, NVIDIA H200, 12000, 143771\n"
    assert tool(layout, "nvidia-smi", q, "--format=csv").stdout == (
        "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H200, 12000 MiB, 143771 MiB\n")
    apps = tool(layout, "nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert apps.returncode == 0 and apps.stdout == "".join(f"{pid}, 6000\n" for pid in servers)
    named = tool(layout, "nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert named.stdout.splitlines() == ["pid, process_name, used_gpu_memory [MiB]"] + [
        f"{pid}, {layout.shipping}, 6000 MiB" for pid in servers]
    bad = tool(layout, "nvidia-smi", "--query-gpu=index,bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stdout


def test_nvidia_smi_matches_the_real_sample_when_idle():
    """No compute process: the real tool prints only the header, or nothing at all (rc 0)."""
    sample = (DATA / "nvidia_smi_sample_h200.txt").read_text()
    gpus = load_model(SimLayout.of("/nonexistent")).gpus    # the defaults
    def out(kind, fields, fmt):
        return fake_nvsmi.render(fake_nvsmi.parse_args([f"--query-{kind}={fields}", f"--format={fmt}"]),
                                 gpus, [], na=False)
    def in_sample(text):        # the sample marks each output line's end with a literal `$`
        return "".join(line + "$\n" for line in text.splitlines()) in sample

    noheader = out("gpu", "index,name,memory.used,memory.total", "csv,noheader,nounits")
    assert noheader == "0, NVIDIA H200, 0, 143771\n" and in_sample(noheader)
    header = out("gpu", "index,name,memory.used,memory.total", "csv")
    assert header == "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H200, 0 MiB, 143771 MiB\n"
    assert in_sample(header)
    assert out("compute-apps", "pid,used_memory", "csv") == "pid, used_gpu_memory [MiB]\n"
    assert out("compute-apps", "pid,used_memory", "csv,noheader,nounits") == ""



def test_nvidia_smi_modes(sim):
    layout, _ = sim
    q = ["--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader"]
    try:
        layout.nvsmi_mode.write_text("na\n")
        assert tool(layout, "nvidia-smi", *q).stdout == "0, NVIDIA H200, [N/A], [N/A]\n"
        layout.nvsmi_mode.write_text("fail\n")
        r = tool(layout, "nvidia-smi", *q)
        assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout
        layout.nvsmi_mode.write_text("hang\n")
        with pytest.raises(subprocess.TimeoutExpired):   # run() kills the child on timeout
            tool(layout, "nvidia-smi", *q, timeout=0.7)
    finally:
        layout.nvsmi_mode.unlink(missing_ok=True)
    assert tool(layout, "nvidia-smi", *q).returncode == 0


def test_adapter_crash_and_idle(sim, spawned):
    layout, _ = sim
    crash_port, idle_port = (p.rpc for p in pick(2))
    before = ledger_pids(layout)
    crash = rig.launch_server(layout.root, crash_port, 2)
    idle = rig.launch_server(layout.root, idle_port, 1)
    spawned.procs += [crash, idle]
    assert crash.wait(timeout=5) == 128 + signal.SIGSEGV   # like sh: 128 + the signal that killed it
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", crash_port), timeout=0.5)
    assert "Signal 11 caught." in (layout.logs / f"server_{crash_port}.log").read_text()
    assert rpc.wait_version("127.0.0.1", idle_port, 5) == "0.9.15"
    time.sleep(0.7)                          # longer than the render delay: idle never allocates
    assert ledger_pids(layout) == before
    used = tool(layout, "nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout
    assert used == "12000\n"


def test_vram_freed_when_the_server_dies(sim, spawned):
    layout, _ = sim
    port = pick(1)[0].rpc
    launcher = rig.launch_server(layout.root, port, 0)
    spawned.procs.append(launcher)
    server = rig.wait_server(layout.root, launcher, port)
    q = ["--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    assert wait_until(lambda: tool(layout, "nvidia-smi", *q).stdout == "18000\n", 5)
    assert server.pid in ledger_pids(layout)
    server.kill()                            # SIGKILL: no cleanup code runs, the "driver" frees it
    assert launcher.wait(timeout=5) == 128 + signal.SIGKILL
    assert tool(layout, "nvidia-smi", *q).stdout == "12000\n"
    assert server.pid not in ledger_pids(layout)   # the stale entry was cleaned


def test_server_hang_mode(sim):
    layout, sides = sim
    port = sides["B"]["rpc_port"]
    rig.inject(layout.root, "B", "server-hang")
    try:
        with rpc.Connection("127.0.0.1", port, timeout=0.5) as c:   # TCP connect works...
            with pytest.raises(socket.timeout):                    # ...but nothing answers
                c.call("version")
    finally:
        layout.server_mode(port).unlink()
    assert rpc.call("127.0.0.1", port, "version").value == "0.9.15"


# ------------------------------------------------------------------------------------------------- conda

def cmdline_of(p: psutil.Process) -> list[str]:
    """A process's argv while it runs; [] once it has exited (the shell's `conda shell.posix hook` child is
    a zombie for a moment before the shell reaps it: psutil refuses a zombie's cmdline)."""
    try:
        return p.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def test_conda_wrapper_holds_the_command_and_ignores_term(sim, spawned):
    layout, _ = sim
    code = "import time; time.sleep(60)"
    wrapper = spawned.popen([str(layout.conda), "run", "-n", "sim-carla", "--no-capture-output", "python", "-c", code])
    wp = psutil.Process(wrapper.pid)
    # The real tree: conda's python → /usr/bin/bash /tmp/tmpXXXX → the command.
    assert wait_until(lambda: wp.children() and [c for c in wp.children()[0].children() if cmdline_of(c)[-1:] == [code]], 5)
    (bash,) = wp.children()
    spawned.adopt(bash)
    script = bash.cmdline()[1]
    assert bash.cmdline()[0] == "/usr/bin/bash" and script.startswith("/tmp/tmp") and len(bash.cmdline()) == 2
    assert wait_until(lambda: len(bash.children()) == 1, 5)   # the `conda shell.posix hook` child is gone
    (child,) = bash.children()
    spawned.adopt(child)
    assert wp.cmdline()[-3:] == ["python", "-c", code]     # the inner command is in the wrapper's cmdline
    assert child.cmdline() == [PY, "-c", code]             # `python` resolved to the env's interpreter
    child_env = child.environ()
    assert child_env["CONDA_DEFAULT_ENV"] == "sim-carla" and child_env["CONDA_PREFIX"].endswith("envs/sim-carla")
    wrapper.terminate()
    assert wrapper.wait(timeout=5) == -signal.SIGTERM
    # The wrapper is gone once its shell has a new parent: then the shell and the evaluator must live on.
    assert wait_until(lambda: bash.ppid() != wrapper.pid, 10)
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE   # the trap: the evaluator lives on
    assert bash.is_running() and child.ppid() == bash.pid and bash.ppid() != wrapper.pid
    child.kill()                                            # reaped by its own pid
    assert wait_gone([child, bash], 3) == []


def test_conda_exit_code_of_a_signalled_child_and_stdin(sim, spawned):
    layout, _ = sim
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    r = tool(layout, "conda", "run", "-n", "sim-carla", "--no-capture-output", "python", "-c", code)
    assert r.returncode == 128 + signal.SIGTERM              # 143, through bash
    # With --no-capture-output stdin is inherited: a heredoc runs.
    r = tool(layout, "conda", "run", "-n", "sim-carla", "--no-capture-output", "python3", "-",
             input="print('ran')\n")
    assert r.returncode == 0 and r.stdout == "ran\n"


def test_conda_env_list_and_unknown_env(sim):
    layout, _ = sim
    envs = json.loads(tool(layout, "conda", "env", "list", "--json").stdout)["envs"]
    assert envs[0] == str(layout.sim / "conda")
    # sim-carla and sim-nocarla, and the preflight's failure envs (sim/envs.py, issue 21).
    assert {Path(p).name for p in envs[1:]} == {"sim-carla", "sim-nocarla", "sim-setuptools81", "sim-twotrees",
                                                "sim-ue5both", "sim-torch"}
    r = tool(layout, "conda", "run", "-n", "nope", "python", "-V")
    assert r.returncode == 1
    assert f"EnvironmentLocationNotFound: Not a conda environment: {layout.sim / 'conda' / 'envs' / 'nope'}" in r.stderr


def test_conda_envs_with_and_without_carla(sim, tmp_path):
    layout, _ = sim
    probe = tmp_path / "probe.py"
    probe.write_text("import os, carla\nprint(os.environ['CONDA_DEFAULT_ENV'], 'carla ok')\n")
    ok = tool(layout, "conda", "run", "-n", "sim-carla", "--cwd", str(tmp_path), "python", "probe.py")
    assert ok.returncode == 0 and ok.stdout == "sim-carla carla ok\n"
    bad = tool(layout, "conda", "run", "-n", "sim-nocarla", "python", str(probe))
    assert bad.returncode == 1 and "ModuleNotFoundError: No module named 'carla'" in bad.stderr


def test_conda_run_swallows_stdin_and_can_hang(sim):
    layout, _ = sim
    # The field incident: `conda run ... python3 - <<EOF` runs nothing and exits 0.
    r = tool(layout, "conda", "run", "-n", "sim-carla", "python3", "-", input="print('ran')\n")
    assert r.returncode == 0 and r.stdout == ""
    try:
        layout.conda_mode.write_text("hang")
        with pytest.raises(subprocess.TimeoutExpired):
            tool(layout, "conda", "env", "list", "--json", timeout=0.7)
    finally:
        layout.conda_mode.unlink()


# ------------------------------------------------------------------------------------------------- netsh

def test_netsh_real_format(sim):
    layout, _ = sim
    sample = (DATA / "netsh_otel_pr10839_b.txt").read_text()
    ranges = [[80, 80, False], [5986, 5986, False], [47001, 47001, False], [55679, 55679, True]]
    assert render_table("tcp", ranges) == sample + "\n"     # the sample file stops right after the footer
    out = tool(layout, "netsh", "int", "ipv4", "show", "excludedportrange", "protocol=tcp")
    assert out.returncode == 0
    assert out.stdout.splitlines()[4:6] == ["        80          80      ", "      5986        5986      "]
    try:
        layout.excluded_json.write_text(json.dumps([[50000, 50059, False], [55679, 55679, True]]))
        out = tool(layout, "netsh", "interface", "ipv4", "show", "excludedportrange", "protocol=tcp").stdout
        assert "     50000       50059      \n     55679       55679     *\n" in out
    finally:
        layout.excluded_json.write_text(json.dumps([[80, 80, False], [5986, 5986, False]]))
    bad = tool(layout, "netsh", "int", "ipv4", "show", "nonsense")
    assert bad.returncode == 1 and "The following command was not found" in bad.stdout


# --------------------------------------------------------------------------------------------- evaluator

def test_resume_type_bool_trap():
    parse = fake_evaluator.build_parser().parse_args
    base = ["--routes", "r.xml", "--agent", "a.py"]
    assert parse(base + ["--resume", "False"]).resume is True
    assert parse(base + ["--resume", ""]).resume is False
    assert parse(base).resume is False
    assert parse(base).traffic_manager_port == 8000 and parse(base).port == 2000


def _configs(ids: list[str]) -> list[b2d.RouteConfig]:
    return [b2d.RouteConfig(index=i, route_id=rid, repetition_index=0, town="Town12", scenario_name="X_1")
            for i, rid in enumerate(ids)]


def _cp(progress, statuses, entry="Started", ids=None):
    ids = ids or [str(i) for i in range(len(statuses))]
    return {"_checkpoint": {"progress": progress, "records": [
        {"index": i, "route_id": f"RouteScenario_{rid}_rep0", "status": s} for i, (rid, s) in
        enumerate(zip(ids, statuses))]}, "entry_status": entry}


@pytest.mark.parametrize("data, expect", [
    ({}, False),
    ({"_checkpoint": {"progress": [1, 5]}}, False),                                  # no entry_status
    (_cp([1, 5], ["Completed"], entry="Invalid"), False),
    ({"entry_status": "Started", "_checkpoint": {"records": []}}, False),           # no progress
    (_cp([2, 4], ["Completed", "Completed"]), False),                               # total mismatch
    (_cp([2, 5], ["Completed", "Completed"], ids=["0", "9"]), False),               # other routes
    (_cp([3, 5], ["Completed", "Failed - Agent crashed", "Completed"]), 1),
    (_cp([3, 5], ["Completed", "Failed - Agent crashed", "Completed"], entry="Crashed"), 0),
    (_cp([2, 5], ["Completed", "Failed - TickRuntime"]), 2),                        # not a resume status
    (_cp([2, 5], ["Perfect", "Completed"], entry="Crashed"), 1),                    # repeat the last route
    (_cp([3, 5], ["Completed"]), 0),                                                # progress > records
])
def test_validate_and_resume_rules(data, expect):
    indexer = b2d.RouteIndexer(_configs([str(i) for i in range(5)]))
    ok, _ = indexer.validate_and_resume(data)
    assert ok is (expect is not False)
    if ok:
        assert indexer.index == expect


def test_validate_and_resume_on_a_real_checkpoint():
    data = json.loads((DATA / "b2d_checkpoint_tfpp_0.json").read_text())
    ids = [r["route_id"].split("_")[1] for r in data["_checkpoint"]["records"]]
    indexer = b2d.RouteIndexer(_configs(ids))
    assert indexer.validate_and_resume(data) == (True, "Resuming from route 28 of 28")
    assert not b2d.RouteIndexer(_configs(ids[:-1])).validate_and_resume(data)[0]


class Eval:
    """One fake evaluator run against side A's server of the module rig."""

    def __init__(self, sim, spawned, tmp_path: Path, *extra: str, route_s: float = 0.3, timeout: float = 2) -> None:
        layout, sides = sim
        self.work = Path(sides["A"]["work"])
        self.port = sides["A"]["rpc_port"]
        self.tm = pick(1, avoid=[self.port, self.port + 1, self.port + 2])[0].tm
        self.checkpoint = tmp_path / "result.json"
        self.faults = tmp_path / "fault"
        self.log = tmp_path / "eval.log"
        self.argv = [PY, str(self.work / "leaderboard_evaluator.py"), "--port", str(self.port),
                     "--traffic-manager-port", str(self.tm), "--routes", str(self.work / "routes.xml"),
                     "--checkpoint", str(self.checkpoint), "--agent", "agent.py", "--timeout", str(timeout), *extra]
        # The patched external-server mode (sim up's default), unbuffered as the console runs it.
        self.env = {**os.environ, "CARLA_SIM_FAULTS": str(self.faults), "SIM_TICK_S": "0.05",
                    "SIM_ROUTE_S": str(route_s), "B2D_EXTERNAL_SERVER": "1", "PYTHONUNBUFFERED": "1"}
        self.spawned = spawned
        self.proc: subprocess.Popen | None = None

    def start(self) -> Eval:
        with open(self.log, "ab") as fh:
            self.proc = self.spawned.popen(self.argv, cwd=self.work, env=self.env, stdout=fh,
                                           stderr=subprocess.STDOUT)
        return self

    def run(self, timeout: float = 15) -> int:
        return self.start().proc.wait(timeout=timeout)

    def fault(self, word: str) -> None:
        self.faults.write_text(word)

    def text(self) -> str:
        return self.log.read_text()

    def cp(self) -> dict:
        return json.loads(self.checkpoint.read_text())


def test_finish_writes_the_bench2drive_format(sim, spawned, tmp_path):
    ev = Eval(sim, spawned, tmp_path, route_s=30)
    ev.start()
    assert wait_until(lambda: ev.log.exists() and "step 2 " in ev.text(), 10)
    ev.fault("finish")
    assert ev.proc.wait(timeout=10) == 0
    cp = ev.cp()
    assert cp["entry_status"] == "Finished" and cp["eligible"] is True
    assert cp["_checkpoint"]["progress"] == [3, 3]
    records = cp["_checkpoint"]["records"]
    assert [r["index"] for r in records] == [0, 1, 2]
    assert [r["route_id"] for r in records] == ["RouteScenario_3514_rep0", "RouteScenario_3255_rep0",
                                                "RouteScenario_26405_rep0"]
    assert not ev.faults.exists()                           # consumed
    real = json.loads((DATA / "b2d_checkpoint_tfpp_0.json").read_text())
    rr = real["_checkpoint"]["records"][0]
    assert list(cp) == list(real)
    assert set(cp["_checkpoint"]) == set(real["_checkpoint"])
    assert set(cp["_checkpoint"]["global_record"]) == set(real["_checkpoint"]["global_record"])
    for r in records:
        assert list(r) == list(rr) and set(r["infractions"]) == set(rr["infractions"])
        assert set(r["scores"]) == set(rr["scores"]) and set(r["meta"]) == set(rr["meta"])
        assert r["status"] in ("Perfect", "Completed") or r["status"].startswith("Failed - ")
        assert r["scores"]["score_composed"] == pytest.approx(r["scores"]["score_route"] * r["scores"]["score_penalty"],
                                                              abs=1e-5)
    assert cp["labels"] == real["labels"] and len(cp["values"]) == len(real["values"])


def test_crash_then_resume_reruns_the_crashed_route(sim, spawned, tmp_path):
    ev = Eval(sim, spawned, tmp_path)
    ev.fault("crash")                          # acted on at the first tick of route 0
    assert ev.run() == 255                     # sys.exit(-1) after a crash
    cp = ev.cp()
    assert cp["entry_status"] == "Crashed" and cp["_checkpoint"]["progress"] == [1, 3]
    assert [r["status"] for r in cp["_checkpoint"]["records"]] == ["Failed - Simulation crashed"]
    assert "1 crash, [1/3], please restart" in ev.text()
    ev2 = Eval(sim, spawned, tmp_path, "--resume", "True", route_s=0.1)
    assert ev2.run() == 0
    cp = ev2.cp()
    assert cp["entry_status"] == "Finished" and cp["_checkpoint"]["progress"] == [3, 3]
    assert "Failed - Simulation crashed" not in [r["status"] for r in cp["_checkpoint"]["records"]]
    assert "Resuming from route 0 of 3" in ev2.text()


def test_resume_with_a_total_mismatch_empties_the_checkpoint(sim, spawned, tmp_path):
    ev = Eval(sim, spawned, tmp_path, "--resume", "False")   # "False" is True: it does resume
    old = _cp([2, 5], ["Completed", "Completed"], ids=["3514", "3255"])
    ev.checkpoint.write_text(json.dumps(old))
    ev.fault("hang")                       # freeze it right after its first write, to look at the file
    ev.start()
    # The fault file goes when the route's set-up takes it; the sensors are written to the checkpoint (in
    # place: truncate, then write) after that, and "Running the route" once they are: read it then.
    assert wait_until(lambda: not ev.faults.exists() and "Running the route" in ev.text(), 10)
    assert "Endpoint's amount of routes does not match the given one" in ev.text()
    cp = ev.cp()
    assert cp["_checkpoint"]["records"] == [] and cp["_checkpoint"]["progress"] == [0, 3]
    assert cp["entry_status"] == "Started"
    assert ev.proc.poll() is None


def test_hang_keeps_the_process_alive_and_the_log_frozen(sim, spawned, tmp_path):
    ev = Eval(sim, spawned, tmp_path, route_s=30)
    ev.start()
    assert wait_until(lambda: ev.log.exists() and "step 3 " in ev.text(), 10)
    p = psutil.Process(ev.proc.pid)
    # A client is connected: the evaluator holds a TCP connection to the server's RPC port.
    assert any(c.raddr and c.raddr.port == ev.port and c.status == psutil.CONN_ESTABLISHED
               for c in p.net_connections("tcp"))
    assert any(c.laddr.port == ev.tm and c.status == psutil.CONN_LISTEN for c in p.net_connections("tcp"))
    ev.fault("hang")
    assert wait_until(lambda: not ev.faults.exists(), 30)

    def settled() -> bool:   # the tick that read the fault may still be writing its line: let it land
        before = (ev.log.stat().st_mtime, ev.log.stat().st_size)
        time.sleep(0.3)
        return (ev.log.stat().st_mtime, ev.log.stat().st_size) == before
    assert wait_until(settled, 30)
    mtime, size, cpu = ev.log.stat().st_mtime, ev.log.stat().st_size, sum(p.cpu_times()[:2])
    time.sleep(0.8)
    assert (ev.log.stat().st_mtime, ev.log.stat().st_size) == (mtime, size)
    assert ev.proc.poll() is None and p.status() in (psutil.STATUS_SLEEPING, psutil.STATUS_DISK_SLEEP)
    assert sum(p.cpu_times()[:2]) - cpu < 0.05
    ev.proc.terminate()                            # SIGTERM: it exits like Python's default
    assert ev.proc.wait(timeout=5) == -signal.SIGTERM


def test_setup_failures_exit_non_zero(sim, spawned, tmp_path):
    ev = Eval(sim, spawned, tmp_path, route_s=30)
    with socket.socket() as busy:                  # the TM port is taken: Bench2Drive moves on, silently
        busy.bind(("127.0.0.1", ev.tm))
        busy.listen(1)
        ev.start()
        p = psutil.Process(ev.proc.pid)
        assert wait_until(lambda: any(c.status == psutil.CONN_LISTEN and c.laddr.port == ev.tm + 1
                                      for c in p.net_connections("tcp")), 10), ev.text()
        assert "traffic_manager init success" in ev.text() and str(ev.tm + 1) not in ev.text()
        ev.proc.terminate()
        ev.proc.wait(timeout=5)
    dead = pick(1)[0].rpc                          # nobody listens there
    (tmp_path / "dead").mkdir()
    ev2 = Eval(sim, spawned, tmp_path / "dead", timeout=0.5)
    ev2.argv[ev2.argv.index("--port") + 1] = str(dead)
    assert ev2.run() == 1
    assert "time-out" in ev2.text()


# ------------------------------------------------------------------------------------------- whole rig

SCHEMA_SERVER = {"host", "command", "rpc_port", "adapter", "adapter_candidates", "vram_min_delta_mb",
                 "start_wait_s", "probe_timeout_s"}
SCHEMA_EVALUATOR = {"host", "conda_env", "cwd", "script", "routes", "checkpoint", "log", "tm_port", "args", "env",
                    "max_attempts"}


def test_up_inject_down_leaves_nothing(tmp_path):
    d = tmp_path / "rig"
    path = rig.up(d, routes=3, route_s=0.5, tick_s=0.05, eval_timeout_s=1)
    layout = SimLayout.of(d)
    try:
        with pytest.raises(RuntimeError, match="already running"):
            rig.up(d)
        cfg = yaml.safe_load(path.read_text())
        assert cfg["version"] == 1 and cfg["name"] == "sim-rig" and cfg["conda"] == [str(layout.conda)]
        assert cfg["hosts"]["local"]["nvidia_smi"] == [str(layout.nvidia_smi)]
        ports = set()
        for name, side in cfg["sides"].items():
            assert set(side["server"]) == SCHEMA_SERVER and set(side["evaluator"]) == SCHEMA_EVALUATOR
            assert side["server"]["command"] == [str(layout.launcher), "-RenderOffScreen", "-nosound"]
            n, tm = side["server"]["rpc_port"], side["evaluator"]["tm_port"]
            ports |= {n, n + 1, n + 2, tm}
            assert side["evaluator"]["env"]["CARLA_SIM_FAULTS"] == str(layout.fault_file(name))
            assert side["heartbeat"] == {"stall_s": 6}
        assert len(ports) == 8                                   # no overlap between sides
        assert wait_until(lambda: {r.side for r in rig.running(d) if r.role == "evaluator"} == {"A", "B"}, 10)
        conda = {r.side: identify(r) for r in started(layout) if r.role == "conda"}
        for name, proc in conda.items():
            cmd = proc.cmdline()
            n = str(cfg["sides"][name]["server"]["rpc_port"])
            assert cmd[cmd.index("--port") + 1] == n and "--checkpoint" in cmd
            (bash,) = proc.children()                  # conda → bash /tmp/tmpXXXX → the evaluator
            (child,) = bash.children()
            assert child.cmdline()[1:4] == ["leaderboard_evaluator.py", "--port", n]
        work_a = Path(cfg["sides"]["A"]["evaluator"]["cwd"])
        assert wait_until(lambda: "step 1 " in (work_a / "logs/eval.log").read_text(), 10)

        rig.inject(d, "A", "crash")
        assert psutil.wait_procs([conda["A"]], timeout=10)[0][0].returncode == 255   # wrapper passes 255 on
        b_server = rig.shipping_processes(d, cfg["sides"]["B"]["server"]["rpc_port"])[0].pid
        assert rig.inject(d, "B", "server-crash").pids == (b_server,)
        # B's evaluator: its next tick costs the client timeout (1 s), then "Simulation crashed".
        assert psutil.wait_procs([conda["B"]], timeout=10)[0][0].returncode == 255
        cp_b = json.loads((Path(cfg["sides"]["B"]["evaluator"]["cwd"]) / "results/result.json").read_text())
        assert cp_b["entry_status"] == "Crashed"
        # Only A's server still holds VRAM; B's ledger entry went with its process.
        assert tool(layout, "nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout == "6000\n"
        assert b_server not in ledger_pids(layout)

        with pytest.raises(ValueError, match="unknown side 'C'"):
            rig.inject(d, "C", "hang")
        with pytest.raises(ValueError, match="unknown fault 'explode'"):
            rig.inject(d, "A", "explode")
    finally:
        records = all_records(layout)
        rig.down(d)
    assert records and [r for r in records if identify(r) is not None] == []
    assert rig.down(d).terminated == ()                         # idempotent


def test_start_writes_the_config_before_the_servers_answer(tmp_path):
    """The demo's start: the config is out at once, the servers (at a lower priority) answer later, and
    wait() records their shipping processes so that down() stops them like up()'s."""
    d = tmp_path / "rig"
    startup = rig.start(d, nice=7)
    layout = SimLayout.of(d)
    try:
        cfg = yaml.safe_load(startup.rig_yaml.read_text())
        assert set(cfg["sides"]) == {"A", "B"}
        for name, (launcher, port) in startup.launchers.items():
            assert cfg["sides"][name]["server"]["rpc_port"] == port
            assert psutil.Process(launcher.pid).nice() == 7
        with pytest.raises(RuntimeError, match="already running"):
            rig.start(d)
        startup.wait()
        for name, (launcher, port) in startup.launchers.items():
            (shipping,) = rig.shipping_processes(d, port)
            assert shipping.nice() == 7                            # inherited from its launcher
            assert rpc.call("127.0.0.1", port, "version", timeout=2).value
        assert {r.side for r in all_records(layout) if r.role == "server"} == {"A", "B"}
        assert not [r for r in rig.running(d) if r.role in ("evaluator", "conda")]   # start() starts none
    finally:
        records = all_records(layout)
        rig.down(d)
    assert records and [r for r in records if identify(r) is not None] == []
