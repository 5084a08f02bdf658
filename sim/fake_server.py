"""The fake CARLA server ("CarlaUE4-Linux-Shipping"): real sockets, real msgpack-rpc, fake GPU.

What it shares with the real one at the interfaces the console observes:
- argv `CarlaUE4 -carla-rpc-port=N -graphicsadapter=K -RenderOffScreen -nosound ...` (UE4-style,
  case-insensitive `-key=value`), started by the CarlaUE4.sh launcher, so the launcher's pid is not ours;
- TCP N answers rpclib msgpack-rpc: `version` -> Response<string> "0.9.15" (what `carla.Client
  .get_server_version()` needs), unknown methods -> an error Response; N+1 (streaming) and N+2
  (secondary) accept and hold; many concurrent clients, keep-alive connections;
- the adapter decides the fate (D/sim/gpus.json, see ledger.py): render -> VRAM ledger entry after a
  moment; idle -> listens, no VRAM; crash -> dies ~1 s after start by SIGSEGV, before listening;
- a port already taken -> it dies (the real one crashes on a failed bind, 0xe06d7363 on Windows);
- D/sim/servers/<N>.mode = `hang` -> it keeps accepting and reading, but never answers (a hung
  server: a TCP connect succeeds, every call times out);
- SIGTERM -> it exits (default disposition).

Run as: `python -m sim.fake_server --sim-dir D CarlaUE4 -carla-rpc-port=N ...` or through the
generated D/bin/CarlaUE4/__main__.py (which is what the shipping "binary" runs).
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import msgpack

from sim import rpc
from sim.layout import PROJECT_NAME, SimLayout, read_mode
from sim.ledger import CRASH, RENDER, load_model, write_entry

SERVER_VERSION = "0.9.15"
# Where the server listens. A real CARLA server listens on every interface; the sim keeps to loopback unless
# told (CARLA_SIM_BIND=0.0.0.0: the netns topology, where the evaluator reaches it by the gateway address).
HOST = os.environ.get("CARLA_SIM_BIND", "127.0.0.1")


@dataclass(frozen=True)
class ServerOptions:
    rpc_port: int = 2000
    streaming_port: int | None = None
    secondary_port: int | None = None
    adapter: int = 0
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ports(self) -> tuple[int, int, int]:
        return (self.rpc_port,
                self.streaming_port if self.streaming_port is not None else self.rpc_port + 1,
                self.secondary_port if self.secondary_port is not None else self.rpc_port + 2)


def parse_args(argv: list[str]) -> ServerOptions:
    """UE4 command line: an optional project name, then `-key=value` / `-flag` tokens (case-insensitive)."""
    values: dict[str, str] = {}
    flags: list[str] = []
    for tok in argv:
        if tok == PROJECT_NAME or not tok.startswith("-"):
            continue
        key, eq, value = tok[1:].partition("=")
        if eq:
            values[key.lower()] = value
        else:
            flags.append(tok)

    def num(*keys: str) -> int | None:
        for k in keys:
            if k in values:
                return int(values[k])
        return None

    rpc_port = num("carla-rpc-port", "carla-port")
    return ServerOptions(rpc_port=rpc_port if rpc_port is not None else 2000,
                         streaming_port=num("carla-streaming-port"),
                         secondary_port=num("carla-secondary-port"),
                         adapter=num("graphicsadapter") or 0,
                         flags=tuple(flags))


def _log(msg: str) -> None:
    print(msg, flush=True)


class FakeServer:
    def __init__(self, layout: SimLayout, opts: ServerOptions) -> None:
        self.layout = layout
        self.opts = opts
        self._listeners: list[socket.socket] = []

    # ------------------------------------------------------------------ sockets
    def bind_all(self) -> None:
        """Bind N, N+1, N+2 before serving anything: a failed bind kills the server like the real one."""
        for port in self.opts.ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # asio (under rpclib) sets SO_REUSEADDR on its acceptors: a restart right after a stop works.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((HOST, port))
            s.listen(128)
            self._listeners.append(s)

    def serve_forever(self) -> None:
        rpc_sock, *hold_socks = self._listeners
        threading.Thread(target=self._accept_loop, args=(rpc_sock, self._serve_rpc), daemon=True,
                         name="rpc-accept").start()
        for s in hold_socks:
            threading.Thread(target=self._accept_loop, args=(s, self._hold), daemon=True,
                             name=f"hold-accept-{s.getsockname()[1]}").start()
        # The main thread just waits (0 % CPU). SIGTERM keeps its default action: the process exits.
        threading.Event().wait()

    @staticmethod
    def _accept_loop(listener: socket.socket, handler) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    @staticmethod
    def _hold(conn: socket.socket) -> None:
        """Streaming / secondary port: accept, read and discard until the client goes away."""
        with conn:
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass

    # ------------------------------------------------------------------ rpc
    def _hanging(self) -> bool:
        """`hang` hangs whatever server holds the port; `hang PID` only that process, as a real hang
        belongs to the process: a restarted server answers again."""
        path = self.layout.server_mode(self.opts.rpc_port)
        try:
            words = path.read_text().split()
        except FileNotFoundError:
            return False
        except OSError as exc:
            _log(f"[sim] bad server mode file: {exc}")
            return False
        if len(words) == 2 and words[0] == "hang" and words[1].isdigit():
            return int(words[1]) == os.getpid()
        try:
            return read_mode(path, ("ok", "hang")) == "hang"
        except (ValueError, OSError) as exc:
            _log(f"[sim] bad server mode file: {exc}")
            return False

    def _serve_rpc(self, conn: socket.socket) -> None:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        with conn:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    unpacker.feed(data)
                    for msg in unpacker:
                        if self._hanging():
                            continue  # read, never answer: the client waits for its full timeout
                        reply = self.handle(msg)
                        if reply is not None:
                            conn.sendall(reply)
            except (OSError, ValueError):  # msgpack's decode errors are ValueErrors
                # A reset peer or garbage on the wire: drop this connection, keep serving others.
                return

    def _version(self) -> str:
        """D/sim/servers/<N>.version, when present, is what this server answers (a UE5 0.10 server, say)."""
        try:
            return self.layout.server_version(self.opts.rpc_port).read_text().strip() or SERVER_VERSION
        except OSError:
            return SERVER_VERSION

    def handle(self, msg: object) -> bytes | None:
        if not (isinstance(msg, list) and msg and msg[0] == rpc.REQUEST and len(msg) == 4):
            return None  # notifications ([2, method, params]) and junk get no reply
        _, msgid, method, _params = msg
        if method == "version":
            return rpc.response(msgid, rpc.ok(self._version()))
        return rpc.response(msgid, rpc.error(f"unknown method {method}"))


def _crash() -> None:
    """Die the way UE4 does on a bad adapter: log the crash handler lines, re-raise SIGSEGV."""
    _log("Signal 11 caught.")
    _log("Malloc Size=65538 LargeMemoryPoolOffset=65554")
    _log("CommonUnixCrashHandler: Signal=11")
    _log("Engine crash handling finished; re-raising signal 11 for the default handler. Good bye.")
    sys.stdout.flush()
    # No core file in the sim dir (core_pattern may be a relative 'core').
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(5)          # the signal is delivered at once; this is only a guard
    os._exit(139)


def main(argv: list[str], sim_dir: str | os.PathLike[str]) -> int:
    from sim.procs import register_self  # psutil: imported late so --help-free parsing stays cheap

    layout = SimLayout.of(sim_dir)
    opts = parse_args(argv)
    register_self(layout, "server")
    model = load_model(layout)
    spec = model.adapter(opts.adapter)

    _log("4.26.2-0+++UE4+Release-4.26 522 0")
    _log("Disabling core dumps.")
    if spec.behaviour == CRASH:
        time.sleep(spec.delay_s)
        _crash()

    server = FakeServer(layout, opts)
    try:
        server.bind_all()
    except OSError as exc:
        _log(f"[sim] cannot bind {HOST}:{opts.ports}: {exc}")
        _log("terminate called after throwing an instance of 'std::system_error'")
        return 134

    if spec.behaviour == RENDER and spec.gpu is not None:
        me = os.getpid()
        import psutil
        ct = psutil.Process(me).create_time()

        def allocate() -> None:
            write_entry(layout, me, ct, int(spec.gpu or 0), spec.mb, rpc_port=opts.rpc_port, adapter=opts.adapter,
                        type=spec.proc_type)

        timer = threading.Timer(spec.delay_s, allocate)
        timer.daemon = True
        timer.start()

    server.serve_forever()
    return 0


def _cli(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--sim-dir":
        return main(argv[2:], argv[1])
    print("usage: fake_server.py --sim-dir D [CarlaUE4] -carla-rpc-port=N -graphicsadapter=K ...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
