"""Local HTTP servers on a free loopback port, in a thread of this process: an ASGI app (the
service's FastAPI app) on a real uvicorn server — the fleet benchmark's service and the service
tests' (which import it through tests/service/httpsupport.py) — and a request handler class on the
standard library's threading server (the fake Kubernetes API, GitHub, Prometheus and git remotes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # uvicorn and FastAPI load only for `serving`
    from fastapi import FastAPI


@contextmanager
def handler_serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 (a thread per request); yields its base URL; stops the server
    on the way out without waiting for requests still open."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Serve `app` on 127.0.0.1; yields its base URL; stops the server on the way out."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
