"""The fake `leaderboard_evaluator.py`: Bench2Drive's command line, checkpoint and resume; no driving.

It behaves like the real evaluator where the console looks:
- argparse exactly as Bench2Drive (`--resume` is `type=bool`: `--resume False` is True);
- connects with the *real* `carla` client (`get_server_version`, `--timeout` as the client timeout);
  no `carla` in the env -> ModuleNotFoundError at import, like the real one; the client keeps its TCP
  connection to the RPC port open for the whole run, and every tick makes one call on it (a dead or
  hung server costs the full timeout, then the run ends as "Simulation crashed");
- the TrafficManager port is bound by this process (bind error -> exit 1 with CARLA's message);
- the routes file is parsed with ElementTree; the checkpoint follows b2d.py (the wipe included);
- one log line per tick (SIM_TICK_S, default 0.5 s, flushed), one route per SIM_ROUTE_S (default 3 s);
- faults from the file named by $CARLA_SIM_FAULTS, checked every tick and deleted when acted on:
  `hang` (no more output, blocked forever at 0 % CPU — the futex_wait incident), `crash` (the route is
  recorded "Failed - Simulation crashed", entry_status Crashed, exit 1), `finish` (the remaining routes
  complete at once, entry_status Finished, exit 0);
  `agent-setup` (the next route's agent cannot be set up, e.g. GPU memory full: the route is recorded
  `Failed - Agent couldn't be set up`, entry_status stays Started, exit 255);
- two server modes, as design.md §4 says of Bench2Drive 0.0.4: with `B2D_EXTERNAL_SERVER=1` (the field
  notes' local patch; `sim up`'s default) it connects to `--host:--port`; without it, it starts its own
  server like the unpatched evaluator: `CARLA_ROOT` unset → KeyError; `--port = find_free_port(--port)`
  (a port that cannot be bound on localhost is skipped: an external server on N..N+2 pushes it to N+3);
  `$CARLA_ROOT/CarlaUE4.sh -RenderOffScreen -nosound -carla-rpc-port=P -graphicsadapter=K` through a shell
  in a new session; a wait (30 s, SIM_SERVER_WAIT_S); an atexit that SIGKILLs that process group;
- the TrafficManager port moves to the next free one silently (find_free_port), as Bench2Drive's does;
- SIGINT ends the running route as plain `Failed` and goes on with the next; SIGTERM has the default
  disposition: it dies at once, atexit handlers skipped (a self-launched server is orphaned);
- the running route's record (index -1) is never in the file, `Started` never appears there;
- the checkpoint's folder is never created (`open(path, 'w')` → FileNotFoundError, exit 1);
- stdout: the per-tick lines are not flushed (Leaderboard 2 / carla_garage style; SIM_FLUSH=1 flushes
  them like Bench2Drive's Wallclock line): redirected to a file they come in 8 KiB bursts unless Python
  runs unbuffered (PYTHONUNBUFFERED=1 / -u).

Exit codes: 0 finished; 255 (`sys.exit(-1)`) after a crash; 1 an uncaught error at set-up.
"""
from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sim import b2d

CRASH_RC = 255            # sys.exit(-1)
SETUP_FAILED_RC = 1       # an exception out of _setup_simulation: Python's own exit status
FAULTS = ("hang", "crash", "finish", "agent-setup")
AGENT_SETUP_FAILED = "Agent couldn't be set up"
TM_BIND_ERROR = ("trying to create rpc server for traffic manager; but the system failed to create "
                 "because of bind error.")


def build_parser() -> argparse.ArgumentParser:
    """Bench2Drive's leaderboard_evaluator.py parser, option for option."""
    p = argparse.ArgumentParser(description="CARLA AD Leaderboard Evaluation: evaluate your Agent in CARLA scenarios\n",
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--host", default="localhost", help="IP of the host server (default: localhost)")
    p.add_argument("--port", default=2000, type=int, help="TCP port to listen to (default: 2000)")
    p.add_argument("--traffic-manager-port", default=8000, type=int,
                   help="Port to use for the TrafficManager (default: 8000)")
    p.add_argument("--traffic-manager-seed", default=0, type=int, help="Seed used by the TrafficManager (default: 0)")
    p.add_argument("--debug", type=int, help="Run with debug output", default=0)
    p.add_argument("--record", type=str, default="",
                   help="Use CARLA recording feature to create a recording of the scenario")
    p.add_argument("--timeout", default=600.0, type=float, help="Set the CARLA client timeout value in seconds")
    p.add_argument("--routes", required=True, help="Name of the routes file to be executed.")
    p.add_argument("--routes-subset", default="", type=str, help="Execute a specific set of routes")
    p.add_argument("--repetitions", type=int, default=1, help="Number of repetitions per route.")
    p.add_argument("-a", "--agent", type=str, help="Path to Agent's py file to evaluate", required=True)
    p.add_argument("--agent-config", type=str, help="Path to Agent's configuration file", default="")
    p.add_argument("--track", type=str, default="SENSORS", help="Participation track: SENSORS, MAP")
    # The trap, kept on purpose: bool("False") is True.
    p.add_argument("--resume", type=bool, default=False, help="Resume execution from last checkpoint?")
    p.add_argument("--checkpoint", type=str, default="./simulation_results.json",
                   help="Path to checkpoint used for saving statistics and resuming")
    p.add_argument("--debug-checkpoint", type=str, default="./live_results.txt",
                   help="Path to checkpoint used for saving live results")
    p.add_argument("--gpu-rank", type=int, default=0)
    return p


@dataclass(frozen=True)
class Pace:
    tick_s: float
    route_s: float
    wall_per_game: float      # duration_system / duration_game: a real model is several times slower
    crash_routes: frozenset[str] = frozenset()   # XML route ids that crash every run (SIM_CRASH_ROUTES, comma list)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Pace:
        return cls(tick_s=float(env.get("SIM_TICK_S", "0.5")), route_s=float(env.get("SIM_ROUTE_S", "3")),
                   wall_per_game=float(env.get("SIM_WALL_PER_GAME", "6")),
                   crash_routes=frozenset(r for r in env.get("SIM_CRASH_ROUTES", "").split(",") if r))


def say(msg: str) -> None:
    print(msg, flush=True)


def tick_line(msg: str) -> None:
    """Not flushed unless SIM_FLUSH=1: to a file, Python block-buffers it (8 KiB) unless unbuffered."""
    print(msg, flush=os.environ.get("SIM_FLUSH") == "1")


def find_free_port(starting_port: int) -> int:
    """Bench2Drive's: the first port from starting_port that binds on localhost."""
    port = starting_port
    while True:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("localhost", port))
                return port
        except OSError:
            port += 1


class Faults:
    """The control file: one word, consumed (deleted) when acted on."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def take(self) -> str | None:
        if self.path is None:
            return None
        try:
            word = self.path.read_text().strip()
        except (FileNotFoundError, IsADirectoryError):
            return None
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        if word not in FAULTS:
            say(f"[sim] ignoring unknown fault {word!r} in {self.path}")
            return None
        return word


class SimulationCrashed(Exception):
    pass


class AgentSetupFailed(Exception):
    pass


class Evaluator:
    def __init__(self, args: argparse.Namespace, pace: Pace, faults: Faults) -> None:
        self.args = args
        self.pace = pace
        self.faults = faults
        self.stats = b2d.Statistics(args.checkpoint)
        self.sensors_initialized = False
        self.fast = False          # `finish`: complete what is left without waiting
        self.deferred: str | None = None   # `agent-setup` taken mid-route: the next set-up fails
        self.client: Any = None   # a carla.Client once set up
        self.tm_socket: socket.socket | None = None
        self.interrupted = False
        self.pending: str | None = None
        # Bench2Drive handles SIGINT only (its _signal_handler → the scenario manager stops the route).
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.interrupted = True

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        import carla  # in the evaluator's env; a missing package fails here like the real one

        attempts = 1
        if os.environ.get("B2D_EXTERNAL_SERVER") != "1":
            self.launch_own_server()
            attempts = 20        # Bench2Drive retries load_world 20 times, 5 s apart
        retry_s = float(os.environ.get("SIM_CONNECT_RETRY_S", "5"))
        for attempt in range(attempts):
            try:
                self.client = carla.Client(self.args.host, self.args.port)
                self.client.set_timeout(self.args.timeout)
                version = self.client.get_server_version()   # RuntimeError (time-out ...) if not there
                break
            except RuntimeError as exc:
                if attempt == attempts - 1:
                    raise
                say(f"load_world failed , attempts={attempt}\n{exc}")
                time.sleep(retry_s)
        say(f"load_world success , attempts=0 (server {version} at {self.args.host}:{self.args.port})")
        # The TrafficManager server lives in the client process and listens on the TM port; Bench2Drive
        # moves to the next free one without a word (Leaderboard 2 would use the given one as is).
        tm = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.args.traffic_manager_port = find_free_port(self.args.traffic_manager_port)
            tm.bind(("127.0.0.1", self.args.traffic_manager_port))
            tm.listen(16)
        except OSError as exc:
            tm.close()
            raise RuntimeError(f"{TM_BIND_ERROR} (port {self.args.traffic_manager_port}: {exc.strerror})") from None
        self.tm_socket = tm
        say("traffic_manager init success, try_time=0")
        agent = self.args.agent
        if not os.path.exists(agent):
            module = os.path.basename(agent).split(".")[0]
            raise ModuleNotFoundError(f"No module named '{module}'")

    def launch_own_server(self) -> None:
        """The unpatched Bench2Drive: its own server, in a new session, killed by atexit (never on SIGTERM)."""
        carla_path = os.environ["CARLA_ROOT"]        # unset: KeyError, like the real one
        self.args.port = find_free_port(self.args.port)
        cmd = (f"{os.path.join(carla_path, 'CarlaUE4.sh')} -RenderOffScreen -nosound "
               f"-carla-rpc-port={self.args.port} -graphicsadapter={self.args.gpu_rank}")
        # The real evaluator hands this one string to a shell; its stand-in does the same through an
        # explicit /bin/sh argv, in a new session as the real one.
        server = subprocess.Popen(["/bin/sh", "-c", cmd], start_new_session=True)
        say(f"{cmd} {server.returncode}")
        atexit.register(os.killpg, server.pid, signal.SIGKILL)
        # Bench2Drive sleeps 30 s flat. The sim waits at most that long (SIM_SERVER_WAIT_S) but stops once
        # the port accepts: a client call on a port not yet listening costs the whole --timeout.
        deadline = time.monotonic() + float(os.environ.get("SIM_SERVER_WAIT_S", "30"))
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.args.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)

    # ------------------------------------------------------------------ the run
    def run(self) -> bool:
        """Bench2Drive's LeaderboardEvaluator.run; returns crashed."""
        indexer = b2d.RouteIndexer(b2d.parse_routes(self.args.routes, self.args.routes_subset,
                                                    self.args.repetitions))
        resume = False
        data: dict = {}
        if self.args.resume:
            data = b2d.fetch_dict(self.args.checkpoint)
            resume, message = indexer.validate_and_resume(data)
            say(message)
        # Like the real one: no makedirs. A missing folder is FileNotFoundError here, every attempt.
        if resume:
            self.stats.add_file_records(data)
        else:
            self.stats.clear_records()
        self.stats.save_progress(indexer.index, indexer.total)
        self.stats.write()

        crashed = False
        t0 = time.time()
        while indexer.peek() and not crashed:
            config = indexer.get_next_config()
            assert config is not None
            crashed = self.run_route(config)
            self.stats.save_progress(indexer.index, indexer.total)
            self.stats.write()
            if crashed:
                say(f"{indexer.index} crash, [{indexer.index}/{indexer.total}], please restart")
                break
        if not crashed:
            say(f"cost time={time.time() - t0}")
            say("\033[1m> Registering the global statistics\033[0m")
            self.stats.compute_global_statistics()
            error = self.stats.validate_and_write(self.sensors_initialized, crashed)
            if error:
                say(f"\n\033[91mThe statistics are badly formed. Setting their status to 'Invalid':\n> {error}\033[0m\n")
        return crashed

    def run_route(self, config: b2d.RouteConfig) -> bool:
        say(f"\n\033[1m========= Preparing {config.name} (repetition {config.repetition_index}) =========\033[0m")
        outcome = b2d.simulate_outcome(config)
        weather_id = str(zlib.crc32(config.full_name.encode()) % 28)  # stable across runs
        save_name = (f"{config.full_name}_{config.town}_{config.scenario_name}_{weather_id}_"
                     f"{datetime.now().strftime('%m_%d_%H_%M_%S')}")
        self.stats.create_route_data(config, weather_id, save_name)
        say("\033[1m> Loading the world\033[0m")
        say("\033[1m> Setting up the agent\033[0m")
        fault, self.deferred = (self.deferred or self.faults.take()), None
        if fault == "agent-setup":
            say("\n\033[91mCould not set up the required agent:")
            say("\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.\033[0m")
            say("\033[1m> Registering the route statistics\033[0m")
            self.stats.save_entry_status("Started")
            self.stats.compute_route_statistics(config.index, None, 0.0, 0.0, AGENT_SETUP_FAILED)
            return True
        self.pending = fault          # any other word is acted on in the route's first tick
        if not self.sensors_initialized:
            self.stats.sensors = list(b2d.SENSOR_ICONS)
            self.stats.write()
            self.sensors_initialized = True
        say("\033[1m> Running the route\033[0m")
        start = time.monotonic()
        tick = 0
        try:
            while not self.fast and time.monotonic() - start < self.pace.route_s:
                self.on_fault(self.pending or self.faults.take())
                self.pending = None
                if self.fast or self.interrupted:
                    break
                if tick and config.route_id in self.pace.crash_routes:
                    raise SimulationCrashed(f"[sim] route {config.route_id} crashes every time (SIM_CRASH_ROUTES)")
                self.server_tick()
                tick += 1
                game_t = (time.monotonic() - start) / self.pace.wall_per_game
                tick_line(f"[{config.full_name}] step {tick} game_time={game_t:.2f}s "
                          f"route {config.index + 1}/{self.stats.total_routes or '?'}")
                time.sleep(self.pace.tick_s)
        except AgentSetupFailed as exc:
            # Bench2Drive: the route is recorded "Failed - Agent couldn't be set up", the run stops (255), and
            # its own resume moves past that route.
            say(f"\n\033[91mCould not set up the required agent:\n> {exc}\033[0m")
            self.stats.save_entry_status("Rejected")
            wall = time.monotonic() - start
            self.stats.compute_route_statistics(config.index, None, wall, wall / self.pace.wall_per_game,
                                                "Agent couldn't be set up")
            return True
        except SimulationCrashed as exc:
            say("\n\033[91mError during the simulation:")
            say(f"\nTraceback (most recent call last):\nRuntimeError: {exc}\033[0m")
            say("\033[1m> Stopping the route\033[0m")
            say("\033[1m> Registering the route statistics\033[0m")
            self.stats.save_entry_status("Crashed")
            wall = time.monotonic() - start
            self.stats.compute_route_statistics(config.index, None, wall, wall / self.pace.wall_per_game,
                                                "Simulation crashed")
            return True
        wall = time.monotonic() - start
        if self.interrupted:
            # SIGINT: the scenario manager stops ticking; the route is scored as far as it got, and a
            # route not completed is plain "Failed". The evaluator goes on with the next route.
            self.interrupted = False
            done = min(wall / self.pace.route_s, 0.99) * 100 if self.pace.route_s else 0.0
            outcome = b2d.Outcome(infractions=outcome.infractions, score_route=round(done, 2),
                                  outside_lanes_pct=outcome.outside_lanes_pct, route_length=outcome.route_length)
        say("\033[1m> Stopping the route\033[0m")
        say("\033[1m> Registering the route statistics\033[0m")
        self.stats.save_entry_status("Started")
        self.stats.compute_route_statistics(config.index, outcome, wall, wall / self.pace.wall_per_game)
        return False

    def server_tick(self) -> None:
        """One call on the client's kept-open connection: a hung or dead server stalls us here."""
        try:
            self.client.get_server_version()
        except RuntimeError as exc:
            raise SimulationCrashed(str(exc)) from None

    def on_fault(self, fault: str | None) -> None:
        if fault == "hang":
            # Alive, 0 % CPU, no output, forever: what the real evaluator does in futex_wait.
            threading.Event().wait()
        elif fault == "crash":
            raise SimulationCrashed("[sim] injected fault: the simulation crashed")
        elif fault == "finish":
            say("[sim] injected fault: finishing the remaining routes now")
            self.fast = True
        elif fault == "agent-setup":
            # Taken while a route runs: it is the next route's set-up that fails, as the fault says.
            self.deferred = fault


def main(argv: list[str] | None = None, sim_dir: str | os.PathLike[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if sim_dir is not None:
        from sim.layout import SimLayout
        from sim.procs import register_self
        register_self(SimLayout.of(sim_dir), "evaluator", os.environ.get("CARLA_SIM_SIDE"))
    ev = Evaluator(args, Pace.from_env(dict(os.environ)), Faults(os.environ.get("CARLA_SIM_FAULTS")))
    try:
        ev.setup()
    except RuntimeError as exc:
        say(f"Traceback (most recent call last):\n  File \"leaderboard_evaluator.py\", in _setup_simulation\n"
            f"RuntimeError: {exc}")
        return SETUP_FAILED_RC
    crashed = ev.run()
    return CRASH_RC if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
