"""A real HTTP endpoint on 127.0.0.1 that records what apprise's `json://` sender POSTs to it.

    with HttpSink() as sink:
        url = sink.url           # json://127.0.0.1:PORT/hook
        ...
        sink.wait_for(lambda msgs: len(msgs) >= 1, 10)

`fail_first=N` answers the first N requests with 500 (to exercise the notifier's bounded retry).
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HttpSink:
    def __init__(self, fail_first: int = 0) -> None:
        self.messages: list[dict] = []
        self.requests = 0
        self.fail_first = fail_first
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink._lock:
                    sink.requests += 1
                    failing = sink.requests <= sink.fail_first
                    if not failing:
                        try:
                            sink.messages.append(json.loads(body))
                        except ValueError:
                            sink.messages.append({"raw": body.decode(errors="replace")})
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"json://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HttpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.messages)

    def wait_for(self, pred: Callable[[list[dict]], object], timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            msgs = self.snapshot()
            if pred(msgs) or time.monotonic() >= deadline:
                return msgs
            time.sleep(0.05)
