"""Servers for the web tests: an aiohttp app on a free loopback port in a thread, `bloomwise serve` as a process,
and a stand-in proxy that answers GET /bloomwise/stats with JSON of the documented shape."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from aiohttp import web


@contextlib.contextmanager
def app_in_thread(app: web.Application, host: str = "127.0.0.1"):
    """Run ``app`` on host:0 in a thread with its own event loop; yield its base URL (no trailing slash)."""
    from bloomwise.web.server import start

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state = {}

    def run():
        asyncio.set_event_loop(loop)
        try:
            state["runner"], state["url"] = loop.run_until_complete(start(app, host, 0))
        except BaseException as error:  # reported to the caller below
            state["error"] = error
        ready.set()
        if "error" not in state:
            loop.run_forever()
            loop.run_until_complete(state["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "the app did not start within 30 s"
    if "error" in state:
        raise state["error"]
    try:
        yield state["url"].rstrip("/")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def stats_app(get_stats) -> web.Application:
    """A stand-in bloomwise proxy: ``GET /bloomwise/stats`` answers ``get_stats()`` (a dict, a Response, or a
    handler coroutine function to answer with)."""
    async def stats(request):
        value = get_stats()
        if asyncio.iscoroutinefunction(value):
            return await value(request)
        return value if isinstance(value, web.StreamResponse) else web.json_response(value)

    app = web.Application()
    app.router.add_get("/bloomwise/stats", stats)
    return app


def get(url: str, timeout: float = 60.0):
    """(status, content type, body bytes) of a GET, also for 4xx/5xx answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def get_json(url: str, timeout: float = 60.0):
    status, _, body = get(url, timeout)
    return status, json.loads(body)


@contextlib.contextmanager
def serve_process(*args: str, timeout: float = 60.0):
    """``bloomwise serve --listen 127.0.0.1:0 ARGS`` as a process; yield (process, base URL); stop it after."""
    command = [sys.executable, "-m", "bloomwise", "serve", "--listen", "127.0.0.1:0", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if line.startswith("bloomwise serve: http://") or not line:
                break
        if not line.startswith("bloomwise serve: http://"):
            process.kill()
            raise AssertionError(f"bloomwise serve did not start: {line!r} {process.stderr.read()[-2000:]}")
        yield process, line.split(": ", 1)[1].strip().rstrip("/")
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
        process.stdout.close()
        process.stderr.close()
