"""A real headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No WebDriver and no websocket library: Chromium reads protocol commands from its fd 3 and writes replies
to its fd 4, each a JSON message ending in a NUL byte. Tests that need it fail, never skip, when it is
missing, with the command that installs it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

INSTALL = "apt-get install chromium"


def chromium_path() -> str:
    """The Chromium binary: ``$LAKESTREAM_CHROMIUM`` if set, else ``chromium`` on the PATH or /usr/bin."""
    chosen = os.environ.get("LAKESTREAM_CHROMIUM")
    candidates = [chosen] if chosen else [shutil.which("chromium"), "/usr/bin/chromium"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = f"LAKESTREAM_CHROMIUM={chosen} is not an executable" if chosen else "it is not installed"
    pytest.fail(f"the browser tests need Chromium and {where}: {INSTALL}", pytrace=False)


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium with one page; :meth:`close` ends the browser and its processes."""

    def __init__(self, *, width: int = 1100, height: int = 900) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="lakestream-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above 4, so that moving them to 3 and 4 cannot overwrite one with the other.
        to_browser_r, from_browser_w = (_above_four(fd) for fd in (to_browser_r, from_browser_w))
        command = [
            chromium_path(),
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        # Chromium wants the pipe on fds 3 and 4; bash (dash takes no fd above 9) moves it there and execs.
        shell = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        self._log = open(Path(self._profile.name) / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", shell, "chromium", *command],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"error": {"message": "chromium closed the pipe"}}
                    self._cond.notify_all()
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False, timeout: float = 30
    ) -> dict[str, Any]:
        """Send one protocol command and wait for its reply's ``result``."""
        with self._cond:
            self._next += 1
            ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(
                f"chromium exited ({self.proc.poll()}) before {method}: {self.log_tail()}"
            ) from None
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies and -1 not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"chromium did not answer {method} within {timeout}s")
                self._cond.wait(left)
            reply = self._replies.pop(ident, None) or self._replies[-1]
        if "error" in reply:
            raise RuntimeError(f"chromium: {method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def goto(self, url: str) -> None:
        """Open ``url`` in the page."""
        self.call("Page.navigate", {"url": url}, session=True)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page: {expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 30) -> Any:
        """Evaluate ``expression`` until it is truthy; its value, or TimeoutError with the last one."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"page: {expression} still {value!r} after {timeout}s")

    def log_tail(self) -> str:
        """The end of Chromium's stderr."""
        self._log.flush()
        text = (Path(self._profile.name) / "chromium.log").read_text(errors="replace")
        return text[-2000:]

    def screenshot(self, path: Path) -> None:
        """A PNG of the page as it is now."""
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """End Chromium (its whole process group) and remove its profile."""
        try:
            self.call("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        self._profile.cleanup()
