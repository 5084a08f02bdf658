"""The console's agent on a remote Linux host: one long-lived process per SSH connection that answers
process-table, stat, bounded read and tail requests in-process, instead of a remote exec (an sshd session,
a shell, coreutils, a Python start) per probe. Stdlib only; run from its file: `python3 agent.py`.

Wire: on stdin and stdout, frames of a 4-byte big-endian length and a MessagePack map. Requests are data,
never code: {"id": int, "op": str, "args": map}. Replies: {"id": int, "ok": true, "value": ...} or
{"id": int, "ok": false, "error": str} with the raw reason. Each request runs in a thread of its own, so
a filesystem call that hangs (a hard NFS mount whose server went away) holds that request only; the
console bounds every request by its own deadline and restarts the agent when too many stay unanswered.
EOF on stdin (the channel closed, the connection dropped) ends the agent at once, hung threads and all.

A display polls the same things every second. For it the console may ask once (`watch`: a period, the
paths to stat, whether to send the table, the pids to re-read) and the agent then pushes, every period,
{"push": watch id, "now": its clock, "stats": the paths whose stat changed, "table": a change set}: the
console's beat reads what came, with no round trip. A push is a measurement with its time; plans and
verifications still ask (a request is answered now, never from a push).

The process table is sent as a change set against the last one this agent sent, when the console names
that one as its base: a steady host changes a few rows a second, not its ~1,000. It is read as the
console reads its own machine (ops/platform/procs.py): (pid, inode of /proc/PID) keys a cache of the
immutable facts; young processes are read again until they settle (fork-then-exec); the processes the
console watches have their state and parent read afresh on every request.
"""
import os
import stat
import struct
import sys
import threading
import time

try:
    import msgpack
except ImportError:   # most remote hosts: the small codec below speaks the same bytes
    msgpack = None

VERSION = 1
MAX_REQUEST = 1 << 20          # a request is a path and a few numbers: anything bigger is a broken peer
MAX_READ = 16 * 1024 * 1024    # the console's own read cap (ops/platform/files.py MAX_READ)
MAX_INFLIGHT = 64              # requests under way at once; past it a request is refused, not queued
SETTLE_S = 2.0
CLK = os.sysconf("SC_CLK_TCK")


# -- MessagePack, the subset the console and the agent exchange --------------------------------------

def pack(obj) -> bytes:
    if msgpack is not None:
        return msgpack.packb(obj, use_bin_type=True)
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _pack(obj, out: bytearray) -> None:
    if obj is None:
        out += b"\xc0"
    elif obj is True or obj is False:
        out += b"\xc3" if obj else b"\xc2"
    elif isinstance(obj, int):
        if 0 <= obj < 0x80 or -32 <= obj < 0:
            out += struct.pack(">b" if obj < 0 else ">B", obj)
        elif 0 <= obj < 1 << 64:
            out += b"\xcf" + struct.pack(">Q", obj)
        elif -(1 << 63) <= obj < 0:
            out += b"\xd3" + struct.pack(">q", obj)
        else:
            raise ValueError(f"integer out of range: {obj}")
    elif isinstance(obj, float):
        out += b"\xcb" + struct.pack(">d", obj)
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 1 << 8:
            out += b"\xd9" + struct.pack(">B", n)
        elif n < 1 << 16:
            out += b"\xda" + struct.pack(">H", n)
        else:
            out += b"\xdb" + struct.pack(">I", n)
        out += data
    elif isinstance(obj, (bytes, bytearray)):
        n = len(obj)
        if n < 1 << 8:
            out += b"\xc4" + struct.pack(">B", n)
        elif n < 1 << 16:
            out += b"\xc5" + struct.pack(">H", n)
        else:
            out += b"\xc6" + struct.pack(">I", n)
        out += obj
    elif isinstance(obj, (list, tuple)):
        n = len(obj)
        if n < 16:
            out.append(0x90 | n)
        elif n < 1 << 16:
            out += b"\xdc" + struct.pack(">H", n)
        else:
            out += b"\xdd" + struct.pack(">I", n)
        for item in obj:
            _pack(item, out)
    elif isinstance(obj, dict):
        n = len(obj)
        if n < 16:
            out.append(0x80 | n)
        elif n < 1 << 16:
            out += b"\xde" + struct.pack(">H", n)
        else:
            out += b"\xdf" + struct.pack(">I", n)
        for k, v in obj.items():
            _pack(k, out)
            _pack(v, out)
    else:
        raise TypeError(f"cannot pack {type(obj).__name__}")


def unpack(data: bytes):
    if msgpack is not None:
        return msgpack.unpackb(data, raw=False)
    obj, end = _unpack(data, 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the value")
    return obj


_FIXED = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
          0xCA: ">f", 0xCB: ">d"}


def _take(data: bytes, at: int, n: int) -> bytes:
    if at + n > len(data):
        raise ValueError("truncated")
    return data[at:at + n]


def _unpack(data: bytes, at: int):
    b = _take(data, at, 1)[0]
    at += 1
    if b < 0x80:
        return b, at
    if b >= 0xE0:
        return b - 0x100, at
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return _take(data, at, n).decode("utf-8"), at + n
    if 0x90 <= b <= 0x9F:
        return _array(data, at, b & 0x0F)
    if 0x80 <= b <= 0x8F:
        return _map(data, at, b & 0x0F)
    if b == 0xC0:
        return None, at
    if b in (0xC2, 0xC3):
        return b == 0xC3, at
    if b in _FIXED:
        fmt = _FIXED[b]
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, _take(data, at, size))[0], at + size
    sizes = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I",
             0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if b not in sizes:
        raise ValueError(f"unsupported MessagePack type 0x{b:02x}")
    fmt = sizes[b]
    size = struct.calcsize(fmt)
    n = struct.unpack(fmt, _take(data, at, size))[0]
    at += size
    if b in (0xD9, 0xDA, 0xDB):
        return _take(data, at, n).decode("utf-8"), at + n
    if b in (0xC4, 0xC5, 0xC6):
        return _take(data, at, n), at + n
    if b in (0xDC, 0xDD):
        return _array(data, at, n)
    return _map(data, at, n)


def _array(data: bytes, at: int, n: int):
    items = []
    for _ in range(n):
        item, at = _unpack(data, at)
        items.append(item)
    return items, at


def _map(data: bytes, at: int, n: int):
    out = {}
    for _ in range(n):
        k, at = _unpack(data, at)
        v, at = _unpack(data, at)
        out[k] = v
    return out, at


# -- the process table ----------------------------------------------------------------------------------

def boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise OSError("btime not found in /proc/stat")


def read_proc_file(path: str, limit: int) -> bytes:
    # os.open/os.read, not open(): a table read re-reads tens of these, and a file object costs twice the read.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_stat(pid: int):
    """(ppid, state, start ticks, comm) of /proc/PID/stat; comm may hold spaces and ')'."""
    raw = read_proc_file(f"/proc/{pid}/stat", 4096)
    lpar, rpar = raw.find(b"("), raw.rfind(b")")
    fields = raw[rpar + 2:].split(b" ", 20)
    state = fields[0].decode("ascii", "replace")
    if state == "Z" and int(fields[17]) > 1:   # a zombie leader whose threads still run has not exited
        state = "Zl"                             # (ops/platform/procs.py ZOMBIE_LEADER)
    return int(fields[1]), state, int(fields[19]), raw[lpar + 1:rpar].decode("utf-8", "replace")


def read_cmdline(pid: int):
    """argv decoded as proctable.py and signal_if.py decode it (the identity the guard re-checks); None when
    it may not be read."""
    try:
        raw = read_proc_file(f"/proc/{pid}/cmdline", 1 << 20)
    except PermissionError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]]


class ProcTable:
    """Rows [pid, ppid, state, create_time, name, cmdline] as tuples; the last table sent, for change sets."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.boot = boot_time()
        self.cache: dict = {}    # (pid, inode) -> row
        self.listing: list | None = None
        self.rows: dict = {}     # pid -> row, the current table
        self.keys: dict = {}     # pid -> (pid, inode)
        self.settled_at = 0.0
        self.requests = ChangeSets()

    def _read(self, pid: int):
        try:
            ppid, state, ticks, name = read_stat(pid)
            cmd = read_cmdline(pid)
        except (FileNotFoundError, ProcessLookupError):
            return None
        return (pid, ppid, state, self.boot + ticks / CLK, name, tuple(cmd) if cmd is not None else None)

    def _full(self, listing, now: float) -> None:
        rows: dict = {}
        keys: dict = {}
        live = set()
        youngest = 0.0
        for name, inode in listing:
            if not name.isdigit():
                continue
            pid = int(name)
            key = (pid, inode)
            live.add(key)
            row = self.cache.get(key)
            if row is None or now - row[3] < SETTLE_S:
                row = self._read(pid)
                if row is None:
                    continue
                self.cache[key] = row
            rows[pid], keys[pid] = row, key
            youngest = max(youngest, row[3])
        if len(self.cache) > len(live):
            for key in [k for k in self.cache if k not in live]:
                del self.cache[key]
        self.listing, self.rows, self.keys, self.settled_at = listing, rows, keys, youngest + SETTLE_S

    def _reread(self, fresh, now: float) -> None:
        for pid in fresh:
            row = self.rows.get(pid)
            if row is None or now - row[3] < SETTLE_S:
                continue
            try:
                ppid, state, _, _ = read_stat(pid)
            except (FileNotFoundError, ProcessLookupError):
                del self.rows[pid]
                self.cache.pop(self.keys.pop(pid), None)
                continue
            if (ppid, state) != (row[1], row[2]):
                self.rows[pid] = self.cache[self.keys[pid]] = (pid, ppid, state) + row[3:]

    def scan(self, fresh) -> dict:
        """The table now (pid -> row); the caller holds self.lock."""
        now = time.time()
        listing = [(e.name, e.inode()) for e in os.scandir("/proc")]
        if listing != self.listing or now < self.settled_at:
            self._full(listing, now)
        self._reread(set(fresh), now)
        return self.rows

    def request(self, base, fresh) -> dict:
        t0 = time.perf_counter()
        with self.lock:
            msg = self.requests.next(self.scan(fresh), base)
        msg["took_ms"] = (time.perf_counter() - t0) * 1e3
        return msg


class ChangeSets:
    """The last table one reader was sent, and the change set against it. Requests and pushes each have
    their own: the console applies replies and pushes in different places, so one sequence for both
    would let a push and a reply race over which base is current."""

    def __init__(self) -> None:
        self.sent: dict | None = None   # pid -> row, the table of `seq`
        self.seq = 0

    def next(self, rows: dict, base) -> dict:
        sent = self.sent if base is not None and base == self.seq else None
        if sent is None:
            changed = list(rows.values())
            gone: list = []
        else:
            changed = [r for pid, r in rows.items() if sent.get(pid) is not r and sent.get(pid) != r]
            gone = [pid for pid in sent if pid not in rows]
        self.sent = dict(rows)
        self.seq += 1
        return {"seq": self.seq, "base": None if sent is None else base, "rows": changed, "gone": gone,
                "count": len(rows)}


# -- files --------------------------------------------------------------------------------------------

def op_stat(path: str) -> dict:
    now = time.time()   # before the stat, as `date; stat` did: an age is never negative for a live writer
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"now": now, "kind": "missing"}
    if not stat.S_ISREG(st.st_mode):   # a FIFO or a device: no writer's mtime, and a read would block
        return {"now": now, "kind": "special"}
    # int / int is correctly rounded, so this is the float of stat's "%.9Y" text, the commands' answer;
    # ns / 1e9 rounds the ns to a float first and can differ in the last bit.
    return {"now": now, "kind": "file", "mtime": st.st_mtime_ns / 10**9, "size": st.st_size}


def stat_key(path: str):
    """A watched path's stat as pushed: [kind, mtime, size] or ["error", reason] (a push never fails
    for one path; the console reads the error as that path's evidence)."""
    try:
        st = op_stat(path)
    except Exception as e:   # PermissionError, ELOOP, ...: the raw reason
        return ["error", f"{type(e).__name__}: {e}"]
    return [st["kind"], st.get("mtime"), st.get("size")]


def _open_regular(path: str):
    """An fd of a regular file, or None when missing. O_NONBLOCK: a FIFO put there is refused, never
    waited on; the type is checked on the open fd, so a file swapped for a FIFO between two calls cannot
    slip through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file: not read")
    return fd


def _read_fd(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def op_read(path: str, limit: int) -> dict:
    """At most limit + 1 bytes: the console tells a file over its limit from one at it."""
    fd = _open_regular(path)
    if fd is None:
        return {"missing": True}
    try:
        return {"data": _read_fd(fd, min(int(limit), MAX_READ) + 1)}
    finally:
        os.close(fd)


def op_tail(path: str, max_bytes: int) -> dict:
    """The last max_bytes bytes (the console cuts them into lines)."""
    fd = _open_regular(path)
    if fd is None:
        return {"missing": True}
    try:
        n = min(int(max_bytes), MAX_READ)
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - n), os.SEEK_SET)
        return {"data": _read_fd(fd, n)}
    finally:
        os.close(fd)


# -- pushes -------------------------------------------------------------------------------------------

MIN_PERIOD_S, MAX_PERIOD_S = 0.1, 60.0
MAX_WATCHED = 4096


class Watch:
    """The console's standing request: every period, the watched paths' stats that changed and the table's
    change set, pushed. A spec replaces the last one; its `reset` starts the change sets afresh (the
    console lost track). A stat that hangs (a dead NFS server) holds this thread, so the pushes stop: the
    console sees them age and asks with requests, each bounded by its own deadline."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.cv = threading.Condition()
        self.spec: tuple | None = None   # (id, period, paths, table, fresh)
        self.stats: dict = {}      # path -> the stat last pushed
        self.sets = ChangeSets()
        self.thread: threading.Thread | None = None

    def set(self, wid: int, args: dict) -> dict:
        period = float(args.get("period", 1.0))
        if not MIN_PERIOD_S <= period <= MAX_PERIOD_S:   # NaN fails both tests
            raise ValueError(f"period {period!r} outside [{MIN_PERIOD_S}, {MAX_PERIOD_S}]")
        paths = [str(p) for p in args.get("paths") or ()]
        if len(paths) > MAX_WATCHED:
            raise ValueError(f"{len(paths)} paths (at most {MAX_WATCHED})")
        fresh = [int(p) for p in args.get("fresh") or ()]
        with self.cv:
            if args.get("reset"):
                self.stats, self.sets = {}, ChangeSets()
            else:   # the console forgets a path it stops watching: watched again, it is sent again
                keep = set(paths)
                self.stats = {p: k for p, k in self.stats.items() if p in keep}
            self.spec = (wid, period, paths, bool(args.get("table")), fresh)
            self.cv.notify()
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, daemon=True)
                self.thread.start()
        return {"watch": wid, "period": period, "paths": len(paths)}

    def run(self) -> None:
        while True:
            with self.cv:
                # Nothing watched (the console stopped asking): no pushes until it asks again.
                self.cv.wait_for(lambda: self.spec is not None and (self.spec[2] or self.spec[3]))
                spec = self.spec
            assert spec is not None
            t0 = time.monotonic()
            # A console that stopped reading (its loop blocked, the channel stalled) gets no pile of pushes
            # here: one waits at most; its view ages and it asks with requests instead.
            if self.agent.backlog() < 2:
                self.agent.reply(self.push(spec))
            with self.cv:
                # A new spec (more paths, other pids) is pushed at once, not a period later.
                self.cv.wait_for(lambda: self.spec is not spec, timeout=max(0.0, t0 + spec[1] - time.monotonic()))

    def push(self, spec) -> dict:
        wid, _period, paths, table, fresh = spec
        with self.cv:   # a reset while this push is read applies to the next one
            last, sets = self.stats, self.sets
        msg: dict = {"push": wid, "now": time.time()}
        stats = {}
        seen = {}
        for path in paths:
            key = stat_key(path)
            seen[path] = key
            if last.get(path) != key:
                stats[path] = key
        with self.cv:
            if self.stats is last:
                self.stats = seen
        msg["stats"] = stats
        if table:
            with self.agent.table.lock:
                rows = self.agent.table.scan(fresh)
                msg["table"] = sets.next(rows, sets.seq if sets.sent is not None else None)
        return msg


# -- the loop -----------------------------------------------------------------------------------------

class Agent:
    def __init__(self, out) -> None:
        self.out = out
        self.table = ProcTable()
        self.inflight = 0
        self.count_lock = threading.Lock()
        # Replies go out through one writer: those ready together leave in one write (one SSH packet).
        self.ready: list = []
        self.ready_cv = threading.Condition()
        self.watch = Watch(self)
        threading.Thread(target=self.writer, daemon=True).start()

    def reply(self, msg: dict) -> None:
        body = pack(msg)
        with self.ready_cv:
            self.ready.append(struct.pack(">I", len(body)) + body)
            self.ready_cv.notify()

    def backlog(self) -> int:
        with self.ready_cv:
            return len(self.ready)

    def writer(self) -> None:
        while True:
            with self.ready_cv:
                while not self.ready:
                    self.ready_cv.wait()
                data, self.ready = b"".join(self.ready), []
            try:
                self.out.write(data)
                self.out.flush()
            except (OSError, ValueError):   # stdout gone: the main loop ends on EOF
                return

    def answer(self, op: str, args: dict, rid: int = 0):
        if op == "hello":
            return {"version": VERSION, "pid": os.getpid(), "now": time.time(),
                    "codec": "msgpack" if msgpack is not None else "builtin"}
        if op == "proctable":
            return self.table.request(args.get("base"), args.get("fresh") or ())
        if op == "stat":
            return op_stat(args["path"])
        if op == "read":
            return op_read(args["path"], args["limit"])
        if op == "tail":
            return op_tail(args["path"], args["max_bytes"])
        if op == "watch":
            return self.watch.set(rid, args)
        raise ValueError(f"unknown op {op!r}")

    def handle(self, rid, op, args) -> None:
        try:
            msg = {"id": rid, "ok": True, "value": self.answer(op, args, rid)}
        except Exception as e:   # the raw reason goes back as the request's evidence
            msg = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            with self.count_lock:
                self.inflight -= 1
        self.reply(msg)

    def dispatch(self, req) -> None:
        rid = req.get("id") if isinstance(req, dict) else None
        op = req.get("op") if isinstance(req, dict) else None
        args = req.get("args") or {} if isinstance(req, dict) else {}
        if not isinstance(rid, int) or not isinstance(op, str) or not isinstance(args, dict):
            raise ValueError(f"malformed request {req!r:.200}")
        with self.count_lock:
            busy = self.inflight >= MAX_INFLIGHT
            if not busy:
                self.inflight += 1
        if busy:
            self.reply({"id": rid, "ok": False, "error": f"agent busy: {MAX_INFLIGHT} requests under way"})
            return
        threading.Thread(target=self.handle, args=(rid, op, args), daemon=True).start()


def read_exactly(f, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve(inp, out) -> str:
    """Answer requests from inp until EOF; the reason the loop ended."""
    agent = Agent(out)
    try:
        while True:
            (n,) = struct.unpack(">I", read_exactly(inp, 4))
            if n > MAX_REQUEST:
                return f"request of {n} bytes"
            agent.dispatch(unpack(read_exactly(inp, n)))
    except EOFError:
        return "eof"
    except (ValueError, TypeError, KeyError, OSError) as e:
        return f"{type(e).__name__}: {e}"


def main() -> None:
    why = serve(sys.stdin.buffer, sys.stdout.buffer)
    if why != "eof":
        sys.stderr.write(f"carla-console agent: {why}\n")
        sys.stderr.flush()
    # os._exit: a thread stuck in a filesystem call must not keep the process (and the session) alive.
    os._exit(0 if why == "eof" else 2)


if __name__ == "__main__":
    main()
