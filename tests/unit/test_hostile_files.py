"""Never block, never balloon; malformed state is UNKNOWN with evidence; no leftovers on cancel (issue 16,
classes 4, 5 and 7). Each test would hang, grow or crash on the code before the fix: the ones that could
hang run the read in a thread and unblock it (a writer opens the FIFO) when it did not come back."""
from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ops.actions.audit import Audit
from ops.platform.bounded import NotRegularFile, TooLarge, read_regular, read_tail
from ops.platform.files import read_text, tail_lines
from ops.platform.local import LocalHost
from ops.probes.harness_state import parse_state
from ops.probes.heartbeat import probe_heartbeat
from ops.tristate import Beat
from tests.support.evalops_sim import REPO

BACKSTOP_S = 30.0   # only reached when the code under test blocks (the defect): never a timing assertion


def _off_thread(fifo: Path, fn):
    """fn() in a thread; if it is still blocked after BACKSTOP_S, open the FIFO for writing to free it and
    fail. Returns fn's value."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(BACKSTOP_S)
    if t.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(BACKSTOP_S)
        pytest.fail(f"reading the FIFO {fifo} blocked")
    return box["v"]


def test_bounded_reads_refuse_special_files_and_cap_before_reading(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for special in (fifo, "/dev/zero", "/dev/null", tmp_path):
        with pytest.raises(NotRegularFile):
            read_regular(special, 1024)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(TooLarge):
        read_regular(big, 4096)
    assert read_regular(big, 5000) == b"x" * 5000
    assert read_tail(big, 10) == b"x" * 10


def test_a_fifo_checkpoint_or_log_never_blocks_a_read(tmp_path) -> None:
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    host = LocalHost()
    got = _off_thread(fifo, lambda: asyncio.run(read_text(host, str(fifo), 5.0)))
    assert got.text is None and "not a regular file" in (got.error or "")
    assert _off_thread(fifo, lambda: asyncio.run(tail_lines(host, str(fifo), 5, 5.0))) is None


def test_ports_netsh_file_dev_zero_does_not_grow(tmp_path) -> None:
    """Under a 1 GiB address-space limit: the old read-everything-then-cap grew until MemoryError."""
    rig_yaml = tmp_path / "rig.yaml"
    rig_yaml.write_text(MINIMAL_RIG.format(state=tmp_path / "state"))
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from console.cli.main import main; sys.exit(main(sys.argv[1:]))")
    res = subprocess.run([sys.executable, "-c", code, "-c", str(rig_yaml), "ports", "--netsh-file", "/dev/zero"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout[-500:] + res.stderr[-2000:]
    assert "not a regular file" in res.stderr and "Traceback" not in res.stderr


MINIMAL_RIG = """\
version: 1
state_dir: {state}
hosts:
  l: {{type: local}}
sides:
  A:
    server: {{host: l, command: [CarlaUE4.sh], rpc_port: 47311}}
    evaluator: {{host: l, conda_env: e, cwd: /tmp, script: x.py, routes: r.xml, checkpoint: c.json, log: l.log,
                tm_port: 47391}}
"""


@pytest.mark.parametrize("raw", ["null", '"running"', "3", "[]", "{}", '{"side": "A", "pid": "x"}',
                                 '{"side": "A", "pid": 1, "create_time": 1, "max_attempts": 3, "attempts": [null]}',
                                 '{"side": "A", "pid": true, "create_time": 1, "max_attempts": 3}'])
def test_malformed_harness_state_is_an_error_not_a_traceback(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_state(json.loads(raw))


def test_a_harness_state_from_a_newer_harness_still_reads() -> None:
    st = parse_state({"side": "A", "pid": 1, "create_time": 1.5, "max_attempts": 3, "status": "running",
                      "recoveries": 2, "attempts": [{"n": 1, "started": 1, "resume": False, "argv": ["x"],
                                                     "note": "new"}]})
    assert st.status == "running" and st.attempts[0].argv == ["x"]


def test_the_audit_takes_argv_bytes_that_are_not_utf8(tmp_path) -> None:
    audit = Audit(tmp_path)
    odd = b"python\xff\xfe x.py".decode("utf-8", "surrogateescape")
    audit.write({"operation": "stop-chain", "targets": [{"pid": 1, "cmdline": [odd, "--port", "2000"]}],
                 odd: odd})
    (line,) = audit.read()
    assert line["targets"][0]["cmdline"][0] == "python\\xff\\xfe x.py"


def test_a_log_mtime_in_the_future_is_unknown_not_fresh(tmp_path) -> None:
    log = tmp_path / "eval.log"
    log.write_text("tick\n")
    future = time.time() + 3600
    os.utime(log, (future, future))
    hb = asyncio.run(probe_heartbeat(LocalHost(), str(log), 1500.0, 5.0))
    assert hb.beat is Beat.UNKNOWN and hb.age_s is None and "future" in (hb.evidence.error or "")
    os.utime(log, None)
    assert asyncio.run(probe_heartbeat(LocalHost(), str(log), 1500.0, 5.0)).beat is Beat.FRESH


def test_a_cancelled_run_leaves_no_unretrieved_gather() -> None:
    """The quit path: a command cancelled while its pipes are read. Before the fix every such cancel
    logged `_GatheringFuture exception was never retrieved ... CancelledError`."""
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _l, ctx: seen.append(str(ctx.get("message"))))
        host = LocalHost()
        for _ in range(6):
            started = asyncio.Event()

            async def run() -> None:
                started.set()
                await host.run(["sh", "-c", "echo go; exec sleep 30"], timeout=60)
            task = asyncio.ensure_future(run())
            await started.wait()
            await asyncio.sleep(0)   # into the readers
            for _ in range(50):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()
    assert not [m for m in seen if "never retrieved" in m], seen
