"""A local server speaking the Prometheus HTTP query API (`/api/v1/query`, vector results) with
per-pod values for the metrics the live audit asks for."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from world.httpserve import handler_serving


class FakePrometheus:
    def __init__(self, sent: dict[str, float], gpu: dict[str, float], drops: float | None) -> None:
        self.sent, self.gpu, self.drops = sent, gpu, drops
        self.queries: list[str] = []

    def answer(self, query: str) -> dict:
        self.queries.append(query)
        wanted = re.search(r'pod=~"([^"]+)"', query)
        pods = wanted.group(1).split("|") if wanted else []
        if "container_network_transmit_bytes_total" in query:
            result = [
                {"metric": {"pod": p}, "value": [1764633600.0, str(self.sent[p])]}
                for p in pods
                if p in self.sent
            ]
        elif "DCGM_FI_DEV_GPU_UTIL" in query:
            result = [
                {"metric": {"pod": p}, "value": [1764633600.0, str(self.gpu[p])]}
                for p in pods
                if p in self.gpu
            ]
        elif "hubble_drop_total" in query:
            result = [] if self.drops is None else [{"metric": {}, "value": [1764633600.0, str(self.drops)]}]
        else:
            return {"status": "error", "errorType": "bad_data", "error": "unknown metric"}
        return {"status": "success", "data": {"resultType": "vector", "result": result}}


@contextmanager
def serve(prom: FakePrometheus) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != "/api/v1/query":
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps(prom.answer(parse_qs(parts.query)["query"][0])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with handler_serving(Handler) as base:
        yield base
