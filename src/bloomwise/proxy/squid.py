"""Run a real Squid (Debian's ``squid`` package) on loopback with a generated configuration: for interop tests
and for the benchmark's comparison.

Everything Squid writes (pid file, cache.log, access.log in Squid's native format, memory-only cache) lives in
one temporary directory; Squid listens on 127.0.0.1 on a free port, with cache digests generated and rebuilt
every ``digest_period`` seconds. Squid started as root drops privileges to ``cache_effective_user`` (Debian:
``proxy``), so the directory is made writable for that user.

>>> import shutil
>>> squid_binary() is None or squid_binary().endswith("squid")
True
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Optional, Sequence

from bloomwise.cache.squid_digest import DIGEST_CONTENT_TYPE, DIGEST_PATH

__all__ = ["SquidPeer", "SquidProcess", "squid_binary", "free_port", "SquidError"]


class SquidError(RuntimeError):
    """Squid could not be started or did not answer in time (the message quotes its cache.log)."""


def squid_binary() -> Optional[str]:
    """The path of the ``squid`` executable, or None (install the Debian package ``squid``)."""
    return shutil.which("squid") or next((p for p in ("/usr/sbin/squid", "/usr/local/sbin/squid")
                                          if os.access(p, os.X_OK)), None)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host`` (for programs such as Squid that cannot bind port 0)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class SquidPeer:
    """One ``cache_peer`` line: a sibling (or parent) the Squid may ask, using its Cache Digest."""

    host: str
    port: int
    kind: str = "sibling"         # or "parent"
    digest: bool = True           # False adds no-digest
    name: Optional[str] = None

    def config_line(self) -> str:
        options = ["proxy-only", "no-query", "no-netdb-exchange"]
        if not self.digest:
            options.append("no-digest")
        if self.name:
            options.append(f"name={self.name}")
        return f"cache_peer {self.host} {self.kind} {self.port} 0 {' '.join(options)}"


@dataclass
class SquidProcess:
    """A Squid on 127.0.0.1, configured for tests: ``with SquidProcess() as squid: ... squid.proxy_url``.

    :param peers: ``cache_peer`` siblings/parents (bloomwise proxies, other Squids).
    :param digest_period: seconds between digest rebuilds and rewrites (Squid's default is one hour).
    :param cache_mem_mb: memory cache size; there is no disk cache.
    :param extra_config: more squid.conf lines.
    """

    peers: Sequence[SquidPeer] = ()
    digest_period: int = 2
    cache_mem_mb: int = 64
    disk_cache_mb: int = 64
    extra_config: Sequence[str] = ()
    startup_timeout: float = 30.0
    port: int = 0
    workdir: str = ""
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> str:
        return os.path.join(self.workdir, "access.log")

    @property
    def cache_log(self) -> str:
        return os.path.join(self.workdir, "cache.log")

    def config_text(self) -> str:
        d = self.workdir
        lines = [
            f"http_port 127.0.0.1:{self.port}",
            "visible_hostname bloomwise-squid-test",
            f"pid_filename {d}/squid.pid",
            f"cache_log {d}/cache.log",
            f"access_log stdio:{d}/access.log squid",
            "cache_store_log none",
            f"coredump_dir {d}",
            "logfile_rotate 0",
            f"cache_mem {self.cache_mem_mb} MB",
            f"cache_dir ufs {d}/cache {self.disk_cache_mb} 4 16" if self.disk_cache_mb else "",
            "maximum_object_size_in_memory 4 MB",
            "memory_cache_mode always",
            "acl all_loopback src 127.0.0.1/32 ::1",
            "http_access allow all_loopback",
            "http_access deny all",
            "icp_port 0",
            "htcp_port 0",
            "snmp_port 0",
            "pinger_enable off",
            "shutdown_lifetime 1 seconds",
            "client_persistent_connections on",
            "server_persistent_connections on",
            "digest_generation on",
            "digest_bits_per_entry 5",
            f"digest_rebuild_period {self.digest_period} seconds",
            f"digest_rewrite_period {self.digest_period} seconds",
            "forwarded_for delete",
            "via on",
            "dead_peer_timeout 2 seconds",
            # Everything runs on loopback: the origin's round-trip time (1 ms) is below Squid's
            # minimum_direct_rtt (400 ms), so Squid would always go direct and never consult a peer's digest.
            "minimum_direct_rtt 0",
            "minimum_direct_hops 0",
            "connect_timeout 5 seconds",
            "read_timeout 10 seconds",
        ]
        lines += [p.config_line() for p in self.peers]
        lines += list(self.extra_config)
        return "\n".join(line for line in lines if line) + "\n"

    def start(self) -> "SquidProcess":
        binary = squid_binary()
        if binary is None:
            raise SquidError("squid is not installed (Debian package `squid`; scripts/system-deps.sh installs it)")
        self.workdir = tempfile.mkdtemp(prefix="bloomwise-squid-")
        if os.geteuid() == 0:  # Squid drops to cache_effective_user (Debian: proxy): let it write its files
            try:
                user = pwd.getpwnam("proxy")
                os.chown(self.workdir, user.pw_uid, user.pw_gid)
            except KeyError:
                pass
        os.chmod(self.workdir, 0o777)
        if not self.port:
            self.port = free_port()
        conf = os.path.join(self.workdir, "squid.conf")
        with open(conf, "w") as f:
            f.write(self.config_text())
        if self.disk_cache_mb:  # create the cache directories first (squid -z), bounded in time
            subprocess.run([binary, "-N", "-z", "-f", conf], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=self.startup_timeout, check=False)
        self.process = subprocess.Popen(
            [binary, "-N", "-f", conf], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.workdir, "stderr.log"), "w"), start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SquidError(f"squid exited with status {self.process.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SquidError(f"squid did not listen on 127.0.0.1:{self.port} within {self.startup_timeout} s: "
                         f"{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for name in ("stderr.log", "cache.log"):
            try:
                with open(os.path.join(self.workdir, name), errors="replace") as f:
                    out += f.read().splitlines()[-lines:]
            except OSError:
                pass
        return " | ".join(out)

    def fetch_digest(self, timeout: float = 5.0) -> bytes:
        """This Squid's own digest as a peer would fetch it (raises urllib errors if there is none yet)."""
        request = urllib.request.Request(self.proxy_url + DIGEST_PATH, headers={"Accept": DIGEST_CONTENT_TYPE})
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.read()

    def access_log_lines(self) -> list[str]:
        try:
            with open(self.access_log, errors="replace") as f:
                return f.read().splitlines()
        except OSError:
            return []

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (then SIGKILL after ``timeout``) the Squid and its helpers; remove the directory."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        if self.workdir and not os.environ.get("BLOOMWISE_KEEP_SQUID_DIR"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "SquidProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
