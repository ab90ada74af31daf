"""A tiny local HTTP server for tests: its GET/PUT answers come from a handler function. It
stands in for a metadata server (GCE), an instance metadata service (Azure) and the like."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handle = Callable[[str, str, dict[str, str], bytes], tuple[int, str]]  # → (status, body)


class LocalServer:
    """Serves ``handle(command, path, headers, body)`` on 127.0.0.1 (a free port: ``url``);
    every request is kept in ``requests``. Use as a context manager, or ``start``/``close``."""

    def __init__(self, handle: Handle) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def _do(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items()}
                outer.requests.append((self.command, self.path, headers, body))
                status, text = handle(self.command, self.path, headers, body)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = _do

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(  # shutdown() waits up to one poll (default 0.5 s)
            target=self.httpd.serve_forever, args=(0.05,), daemon=True
        )

    def start(self) -> LocalServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
