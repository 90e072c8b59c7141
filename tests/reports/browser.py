"""Headless Chromium driven over the DevTools protocol (a WebSocket): load a page at a given
viewport, collect what it logs (console, exceptions, CSP violations, failed loads), measure its
layout and take a screenshot. The pages have no script; DevTools evaluates outside the page's CSP."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Loaded:
    messages: list[str] = field(default_factory=list)  # errors and warnings the page produced
    scroll_width: int = 0
    viewport_width: int = 0
    html: str = ""
    screenshot: bytes = b""


class Browser:
    def __init__(self) -> None:
        assert CHROMIUM is not None
        self.profile = tempfile.mkdtemp(prefix="chromium-")
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        url = None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url is not None, "chromium did not start its DevTools endpoint"
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(url, max_size=64 * 2**20, open_timeout=30))
        self.next_id = 0

    def close(self) -> None:
        self.stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        return self.next_id

    def _call(
        self, method: str, params: dict[str, Any] | None, session: str | None, events: list[dict[str, Any]]
    ) -> dict[str, Any]:
        wanted = self._send(method, params, session)
        while True:
            msg = json.loads(self.ws.recv(timeout=120))
            if msg.get("id") == wanted:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
            events.append(msg)

    def load(self, url: str, width: int = 1280, height: int = 900, shot: Path | None = None) -> Loaded:
        events: list[dict[str, Any]] = []
        target = self._call("Target.createTarget", {"url": "about:blank"}, None, events)["targetId"]
        session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True}, None, events)[
            "sessionId"
        ]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self._call(f"{domain}.enable", {}, session, events)
            self._call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
                session,
                events,
            )
            self._call("Page.navigate", {"url": url}, session, events)
            deadline = time.monotonic() + 120
            while not any(e.get("method") == "Page.loadEventFired" for e in events):
                assert time.monotonic() < deadline, f"{url} did not load"
                events.append(json.loads(self.ws.recv(timeout=120)))
            result = self._call(
                "Runtime.evaluate",
                {
                    "expression": "JSON.stringify([document.documentElement.scrollWidth, window.innerWidth,"
                    " document.documentElement.outerHTML])",
                    "returnByValue": True,
                },
                session,
                events,
            )
            scroll, inner, html = json.loads(result["result"]["value"])
            loaded = Loaded(scroll_width=scroll, viewport_width=inner, html=html)
            if shot is not None:
                metrics = self._call("Page.getLayoutMetrics", {}, session, events)
                full = metrics.get("cssContentSize") or metrics["contentSize"]
                data = self._call(
                    "Page.captureScreenshot",
                    {
                        "format": "png",
                        "captureBeyondViewport": True,
                        "clip": {
                            "x": 0,
                            "y": 0,
                            "width": width,
                            "height": min(full["height"], 6000),
                            "scale": 1,
                        },
                    },
                    session,
                    events,
                )
                loaded.screenshot = base64.b64decode(data["data"])
                shot.parent.mkdir(parents=True, exist_ok=True)
                shot.write_bytes(loaded.screenshot)
            for e in events:
                method, p = e.get("method"), e.get("params") or {}
                if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                    loaded.messages.append(f"console.{p['type']}: {p.get('args')}")
                elif method == "Runtime.exceptionThrown":
                    loaded.messages.append(f"exception: {p.get('exceptionDetails')}")
                elif method == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                    loaded.messages.append(f"log.{p['entry']['level']}: {p['entry'].get('text')}")
            return loaded
        finally:
            self._call("Target.closeTarget", {"targetId": target}, None, events)
