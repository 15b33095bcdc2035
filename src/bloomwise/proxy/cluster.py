"""Start a test origin and N bloomwise proxies (each peered with all the others) on loopback, one process each.

The proxies fetch from the test origin only (``--allow-destinations HOST:PORT`` of the origin) unless the proxy
options say otherwise. One process per proxy, as on separate hosts: each has its own event loop and cache, they talk only over HTTP, the
two cores are both used, and one proxy can be killed and restarted without touching the others (the fault tests
do exactly that). Ports are chosen free before the proxies start, because every proxy must know its peers'
addresses at start.

>>> c = Cluster(2, origin_documents=10)
>>> len(c.ports), c.running
(0, False)
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

from bloomwise.proxy.squid import free_port

__all__ = ["Cluster", "ClusterError", "read_ready_line", "stop_processes"]


class ClusterError(RuntimeError):
    """A process of the cluster did not start (the message quotes its output)."""


def read_ready_line(process: subprocess.Popen, timeout: float, what: str) -> dict:
    """The JSON line a server process (origin, proxy) prints on standard output once it listens; raises
    ClusterError if it exits, prints something else, or says nothing within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    buffer = b""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            rest = process.stdout.read() or b""
            raise ClusterError(f"{what} exited with status {process.returncode}: "
                               f"{(buffer + rest).decode(errors='replace')[-500:]}")
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            buffer += chunk
            if b"\n" in buffer:
                line = buffer.split(b"\n", 1)[0]
                try:
                    return json.loads(line)
                except ValueError:
                    raise ClusterError(f"{what} printed {line[:200]!r}, expected its JSON address line") from None
    raise ClusterError(f"{what} did not start within {timeout} s")


def stop_processes(processes, timeout: float = 10.0) -> None:
    """SIGTERM every process still running, wait up to ``timeout`` seconds in all, SIGKILL what is left (and wait
    for it, at most ``timeout`` more), and close each one's standard output."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout)
        if p.stdout is not None:
            p.stdout.close()


class Cluster:
    """``Cluster(N, origin_documents=D, proxy_options=[...])``: ``start()``, ``origin_url``, ``proxy_urls``,
    ``kill(i)``, ``restart(i)``, ``stop()``; a context manager."""

    def __init__(self, num_proxies: int, *, origin_documents: int = 1000, mean_size: int = 4096,
                 proxy_options: Sequence[str] = (), startup_timeout: float = 60.0, host: str = "127.0.0.1",
                 stderr=None):
        if num_proxies < 1:
            raise ValueError(f"a cluster needs at least 1 proxy, got {num_proxies}")
        if origin_documents < 1:
            raise ValueError(f"the origin needs at least 1 document, got {origin_documents}")
        self.num_proxies = num_proxies
        self.origin_documents = origin_documents
        self.mean_size = mean_size
        self.proxy_options = list(proxy_options)
        self.startup_timeout = startup_timeout
        self.host = host
        self.stderr = stderr
        self.ports: list[int] = []
        self.origin_url: Optional[str] = None
        self.origin: Optional[subprocess.Popen] = None
        self.proxies: list[Optional[subprocess.Popen]] = []

    @property
    def running(self) -> bool:
        return self.origin is not None and self.origin.poll() is None

    @property
    def proxy_urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.ports]

    def _python(self) -> list[str]:
        return [sys.executable, "-m"]

    def start(self) -> "Cluster":
        try:
            self.origin = subprocess.Popen(
                self._python() + ["bloomwise.proxy.origin", "--listen", f"{self.host}:0",
                                  "--documents", str(self.origin_documents), "--mean-size", str(self.mean_size)],
                stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL)
            self.origin_url = read_ready_line(self.origin, self.startup_timeout, "the origin")["origin"]
            self.ports = [free_port(self.host) for _ in range(self.num_proxies)]
            while len(set(self.ports)) < len(self.ports):
                self.ports = [free_port(self.host) for _ in range(self.num_proxies)]
            self.proxies = [self._spawn(i) for i in range(self.num_proxies)]
            for i, process in enumerate(self.proxies):
                read_ready_line(process, self.startup_timeout, f"proxy {i}")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, i: int) -> subprocess.Popen:
        args = self._python() + ["bloomwise", "proxy", "--listen", f"{self.host}:{self.ports[i]}",
                                 "--name", f"proxy-{i}"]
        for j, url in enumerate(self.proxy_urls):
            if j != i:
                args += ["--peer", url]
        if "--allow-destinations" not in self.proxy_options:  # the test origin, and nothing else
            args += ["--allow-destinations", self.origin_url.removeprefix("http://")]
        return subprocess.Popen(args + self.proxy_options, stdout=subprocess.PIPE, stderr=self.stderr,
                                stdin=subprocess.DEVNULL)

    def kill(self, i: int) -> None:
        """SIGKILL proxy ``i`` (a crash: nothing is cleaned up)."""
        process = self.proxies[i]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def restart(self, i: int) -> None:
        """Start proxy ``i`` again on the same port (after :meth:`kill`), with an empty cache."""
        self.kill(i)
        self.proxies[i] = self._spawn(i)
        read_ready_line(self.proxies[i], self.startup_timeout, f"proxy {i}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process, then SIGKILL what is still running after ``timeout`` seconds."""
        stop_processes([p for p in self.proxies + [self.origin] if p is not None], timeout)

    def describe(self) -> str:
        lines = [f"origin   {self.origin_url}   documents {self.origin_url}/doc/0 .. /doc/{self.origin_documents - 1}"]
        for i, url in enumerate(self.proxy_urls):
            lines.append(f"proxy-{i}  {url}   stats {url}/bloomwise/stats")
        lines.append("")
        lines.append(f"try:  curl -x {self.proxy_urls[0]} {self.origin_url}/doc/1 -o /dev/null -D -")
        if len(self.proxy_urls) > 1:
            lines.append(f"      curl -x {self.proxy_urls[1]} {self.origin_url}/doc/1 -o /dev/null -D -   "
                         f"(a remote hit once the summary arrived)")
            lines.append(f"      curl {self.proxy_urls[1]}/bloomwise/stats")
        return "\n".join(lines)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
