"""A real headless Chromium driven over the Chrome DevTools Protocol (a websocket, through aiohttp).

    async with Browser.launch(tmp_path) as browser:
        await browser.open("http://127.0.0.1:8780/")
        rows = await browser.eval("document.querySelectorAll('tr').length")
        assert not browser.errors          # console errors, uncaught exceptions, failed loads

CDP over aiohttp needs nothing beyond the project's own dependencies (selenium would add a
package and chromedriver for the same few calls).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
"""The browser binary, None where none is installed (tests that need it skip)."""


class Browser:
    """One page of a headless Chromium: navigate, evaluate JavaScript, take screenshots, collect errors."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.errors: list[str] = []
        """Console errors, uncaught exceptions and failed loads the page has reported so far."""
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    @asynccontextmanager
    async def launch(cls, profile: Path, width: int = 1400, height: int = 1100) -> AsyncIterator[Browser]:
        """Start Chromium with a fresh profile in `profile`, attach to its page; stop it after."""
        assert CHROMIUM is not None, "no chromium on PATH"
        proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = await _devtools_port(profile / "DevToolsActivePort", proc)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    pages = [t for t in await response.json() if t["type"] == "page"]
                async with session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=64 * 2**20) as ws:
                    browser = cls(ws)
                    try:
                        for domain in ("Runtime", "Log", "Page"):
                            await browser.send(f"{domain}.enable")
                        yield browser
                    finally:
                        browser._reader.cancel()
        finally:
            proc.kill()
            proc.wait()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One CDP command; its result, or AssertionError with the protocol's error."""
        key = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        await self.ws.send_json({"id": key, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return dict(reply.get("result") or {})

    async def open(self, url: str) -> None:
        """Navigate to `url` and wait for its load event."""
        await self.send("Page.navigate", url=url)
        await self.until("document.readyState === 'complete' && location.href.startsWith(" + _js(url) + ")", 30)

    async def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout: float = 60.0, every: float = 0.1) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = await self.eval(expression)
            if value:
                return value
            await asyncio.sleep(every)
        raise AssertionError(f"{expression} still {value!r} after {timeout}s")

    async def screenshot(self, path: Path) -> None:
        """Write the whole page as a PNG."""
        size = await self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    async def _read(self) -> None:
        async for frame in self.ws:
            message = frame.json()
            if "id" in message:
                future = self._waiting.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
                continue
            method, params = message.get("method"), message.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append(
                    "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                self.errors.append(
                    "exception: " + str(details.get("exception", {}).get("description", details.get("text")))
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                self.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")


async def _devtools_port(port_file: Path, proc: subprocess.Popen[bytes]) -> int:
    """The debugging port Chromium writes to its profile once it listens."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode} before listening")
        if port_file.is_file() and port_file.read_text().strip():
            return int(port_file.read_text().splitlines()[0])
        await asyncio.sleep(0.1)
    raise AssertionError("chromium did not open its debugging port within 60 s")


def _js(value: str) -> str:
    """A Python string as a JavaScript string literal."""
    return json.dumps(value)
