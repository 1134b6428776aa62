"""A real HTTP endpoint for the tests' scripted exposition (vLLM's, kvtier evict's): what a
model-server or evictor pod serves on /metrics, on a free local port."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MetricsServer:
    """Answers every GET with `body()`, as Prometheus text exposition."""

    def __init__(self, body: Callable[[], bytes]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                text = body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
