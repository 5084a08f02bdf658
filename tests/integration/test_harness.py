"""The detached harness on the sim rig: it resumes by itself after a crash, and it outlives the console.

- `inject crash` → the evaluator exits non-zero mid-route (`Failed - Simulation crashed`, entry_status
  Crashed) → the harness starts attempt 2 on only the routes that need it (Bench2Drive's own `--resume`
  would re-run the route before the crash too): a subset routes file into its own checkpoint, merged back;
  the records completed before the crash are still in the checkpoint, untouched.
- The console that launched a side runs inside a "login session" (its own session, like an SSH login);
  that whole session is killed → the harness, in a session of its own, keeps running; a new
  `status --json` shows the side running with its attempt count (read from harness.json).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.evalops_sim import REPO, alive, checkpoint, cli, done_records, harness_state, sim_rig, wait_until


def test_crash_resumes_by_itself_and_a_new_console_sees_the_run(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, routes=30) as rig_yaml:
        # ---- A: crash → attempt 2, resumed, records kept ---------------------------------------
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) >= 2, 15)
        before = [r["route_id"] for r in done_records(checkpoint(d, "A"))]
        subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), "A", "crash"],
                       cwd=REPO, check=True, capture_output=True)
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] == 2 and s["status"] == "running"
                        and s, 20)
        assert st, harness_state(d, "A")
        first, second = st["attempts"]
        assert first["exit_code"] not in (0, None) and first["ended"] is not None
        assert first["resume"] is False and second["resume"] is False and "--resume" not in second["argv"]
        routes = second["argv"][second["argv"].index("--routes") + 1]
        assert routes.startswith(str(d / "state" / "sides" / "A" / "runs")), routes
        assert second["backup"] and Path(second["backup"]).exists()
        crashed = json.loads(Path(second["backup"]).read_text())["_checkpoint"]["records"]
        assert crashed[-1]["status"] == "Failed - Simulation crashed"
        assert wait_until(lambda: len(done_records(checkpoint(d, "A"))) > len(crashed) + 1, 20)
        recs = checkpoint(d, "A")["_checkpoint"]["records"]
        after = [r["route_id"] for r in recs]
        assert after[:len(before)] == before, "a completed record was lost across the crash"
        # The route before the crash is not re-run (its record is the same bytes); the crashed one is.
        assert recs[:len(crashed) - 1] == crashed[:-1]
        assert recs[len(crashed) - 1]["status"] != "Failed - Simulation crashed"

        # ---- B: launched from a login session that is then killed whole ------------------------
        login = subprocess.Popen(["bash", "-c", '"$0" -m console -c "$1" launch B --yes; sleep 60',
                                  sys.executable, str(rig_yaml)], cwd=REPO, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            hb = wait_until(lambda: (s := harness_state(d, "B")) and s["status"] == "running" and s, 90)   # a backstop
            assert hb, harness_state(d, "B")
        finally:
            os.killpg(login.pid, signal.SIGKILL)   # the session's group: its shell and whatever it left
            login.wait()
        progress = len(done_records(checkpoint(d, "B")))
        assert alive(hb["pid"], hb["create_time"]), "the harness died with the console's session"
        assert os.getsid(hb["pid"]) == hb["pid"] != os.getsid(0)   # its own session: no SIGHUP reaches it
        assert wait_until(lambda: len(done_records(checkpoint(d, "B"))) > progress, 15), "the run stopped"

        out = cli(rig_yaml, "status", "--json", "--no-rpc")
        assert out.returncode == 0, out.stderr
        snap = json.loads(out.stdout)["sides"]
        assert snap["B"]["evaluator"]["state"] == "ALIVE" and snap["B"]["evaluator"]["attempt"] == 1
        assert snap["B"]["evaluator"]["harness"] == "running"
        assert [m["role"] for m in snap["B"]["evaluator"]["chain"]] == ["harness", "wrapper", "shell", "evaluator"]
        assert snap["A"]["evaluator"]["attempt"] == 2 and snap["A"]["evaluator"]["state"] == "ALIVE"


def test_harness_refuses_a_new_attempt_on_a_dead_server(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    # A short client timeout: a call to a dead server costs the evaluator its whole --timeout.
    with sim_rig(d, sides=("A",), eval_timeout_s=2.0) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        assert wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "running", 10)
        # The server dies: the evaluator fails, and the harness refuses to start another attempt.
        subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), "A", "server-crash"],
                       cwd=REPO, check=True, capture_output=True)
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] in ("refused", "failed") and s, 30)
        assert st and st["status"] == "refused" and "server" in st["detail"], harness_state(d, "A")
        assert wait_until(lambda: not alive(st["pid"], st["create_time"]), 5)
        # And a launch now is refused too, with exit 3, dry-run alike.
        assert cli(rig_yaml, "launch", "A", "--dry-run").returncode == 3


def test_harness_stops_after_max_attempts(tmp_path: Path) -> None:
    d = tmp_path / "sim"
    with sim_rig(d, sides=("A",)) as rig_yaml:
        assert cli(rig_yaml, "launch", "A", "--yes").returncode == 0
        for n in (1, 2, 3):   # the sim's rig.yaml sets max_attempts: 3
            assert wait_until(lambda: (s := harness_state(d, "A")) and s["attempt"] == n
                              and s["status"] == "running", 20), harness_state(d, "A")
            subprocess.run([sys.executable, "-m", "console", "sim", "inject", "--dir", str(d), "A", "crash"],
                           cwd=REPO, check=True, capture_output=True)
        # The budget spent: the side stops cleanly and says why (status gave_up, lifecycle GAVE_UP).
        st = wait_until(lambda: (s := harness_state(d, "A")) and s["status"] == "gave_up" and s, 20)
        assert "attempt budget spent" in st["detail"], st
        assert st and st["attempt"] == 3 and all(a["exit_code"] not in (0, None) for a in st["attempts"])
        assert wait_until(lambda: not alive(st["pid"], st["create_time"]), 5)
