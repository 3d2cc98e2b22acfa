"""A real headless Chromium for tests, driven over the DevTools protocol on a pipe.

Chromium's `--remote-debugging-pipe` reads protocol commands on file descriptor 3 and writes
responses and events on 4, each a JSON message ending in a NUL byte, so no websocket client or
browser-automation package is needed. Used to load report.html from disk with the network off,
collect console messages and exceptions, evaluate expressions in the page and take a screenshot.

`find_chromium()` locates Debian's `chromium` (the test set-up installs it with apt where it can:
see `ensure_chromium`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str | None:
    """Chromium's path, installing Debian's package first when running as root with apt-get and
    none is installed (as CI and a fresh development machine are). None when it cannot be had."""
    found = find_chromium()
    if found or os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            subprocess.run(command, env=env, capture_output=True, timeout=600, check=True)
        except (subprocess.SubprocessError, OSError):
            return None
    return find_chromium()


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, binary: str, width: int = 1280, height: int = 2000) -> None:
        self.binary = binary
        self.size = (width, height)
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""

    def __enter__(self) -> Browser:
        self.profile = tempfile.mkdtemp(prefix="tf-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            f"--window-size={self.size[0]},{self.size[1]}",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            [self.binary, *flags],
            pass_fds=(3, 4),
            preexec_fn=lambda: (os.dup2(to_browser_r, 3), os.dup2(from_browser_w, 4)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.send(domain, session=True)
        # The report must need nothing from the network: refuse every request that is not a file.
        self.send("Network.enable", session=True)
        self.send("Network.setBlockedURLs", session=True, urls=["http://*", "https://*", "ws://*", "wss://*"])
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, *, session: bool = False, timeout: float = 30, **params: Any) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event."""
        self.send("Page.navigate", session=True, url=path.resolve().as_uri())
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        metrics = self.send("Page.getLayoutMetrics", session=True)["cssContentSize"]
        data = self.send(
            "Page.captureScreenshot",
            session=True,
            format="png",
            captureBeyondViewport=True,
            clip={
                "x": 0,
                "y": 0,
                "width": metrics["width"],
                "height": min(metrics["height"], 12000),
                "scale": 1,
            },
        )["data"]
        path.write_bytes(base64.b64decode(data))

    def requests(self) -> list[str]:
        """URLs the page asked for, in order."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads seen so far."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "warning",
                "assert",
            ):
                out.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                out.append(f"log {params['entry']['level']}: {params['entry'].get('text')}")
        return out
