"""A cluster across emulated hosts: the origin and each proxy in its own Linux network namespace, with delays.

``NetnsCluster(3, proxy_delays_ms=(4, 6, 10), origin_delay_ms=25)`` creates one namespace per proxy and one for
the origin (``ip netns``; needs root), gives namespace k the address ``10.77.(k+1).2`` (the origin is k = 0) and
joins them through a hub namespace, so that every packet from namespace i to namespace j waits the one-way delay
``d_i + d_j`` (each namespace's access link costs its ``d``, both ways): the round-trip time between i and j is
``2 (d_i + d_j)``. Every address lives inside the namespaces the cluster creates, nothing is routed out of them, and
the namespaces are deleted by :meth:`NetnsCluster.stop` (also when ``start`` fails half-way).

Two ways to delay, chosen at run time (``emulator="auto"``) and reported in :attr:`NetnsCluster.emulator`:

- ``netem``: a veth pair joins each namespace to the hub, which routes between them; ``tc qdisc ... netem delay``
  on both ends of namespace k's pair adds ``d_k`` each way. Used where the kernel has the netem qdisc.
- ``relay``: a kernel without netem (``tc`` answers "Specified qdisc kind is unknown") gets a TUN device in each
  namespace instead, and one small process in the hub (:func:`relay_packets`) reads every IPv4 packet a namespace
  sends, holds it ``d_i + d_j`` and writes it into the destination namespace's TUN device. It relays packets, not
  TCP streams, so addresses and connections are end to end as with netem (a proxy sees its peer's own address).
  Packets of one pair keep their order; a pair holds at most ``MAX_QUEUED_PACKETS`` packets in flight (more are
  dropped, as a full link queue drops them).

Processes are started with ``ip netns exec``; :meth:`NetnsCluster.client` runs a small HTTP client in a namespace
(``python -m bloomwise.proxy.netns client``, a JSON job on standard input) to fetch through a proxy there.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from typing import Optional, Sequence

from bloomwise.proxy.cluster import ClusterError, read_ready_line, stop_processes
from bloomwise.proxy.origin import document_body

__all__ = ["NetnsCluster", "NamespaceError", "namespaces_unavailable", "netem_available", "relay_packets",
           "NETWORK", "ORIGIN_PORT", "PROXY_PORT"]

#: Every address the cluster uses is in this network, and only inside its namespaces.
NETWORK = "10.77.0.0/16"
ORIGIN_PORT = 8080
PROXY_PORT = 3128
#: Packets of one (source, destination) pair the relay holds at once; more are dropped.
MAX_QUEUED_PACKETS = 4096
COMMAND_TIMEOUT = 20.0

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000


class NamespaceError(ClusterError):
    """A namespace, link or delay could not be set up (the message quotes the command and its error)."""


def host_address(k: int) -> str:
    """The address of namespace ``k`` (0: the origin, 1..N: the proxies)."""
    return f"10.77.{k + 1}.2"


def _hub_side_address(k: int) -> str:
    return f"10.77.{k + 1}.1"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS`` (bounded in time); NamespaceError with its message if it fails and ``check``."""
    command = ["ip", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"`{' '.join(command)}` failed: {exc}") from None
    if check and done.returncode != 0:
        raise NamespaceError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def _set_sysctl(namespace: str, key: str, value: str, check: bool = True) -> None:
    """Write ``/proc/sys/KEY`` (dots for slashes) inside ``namespace``, with this Python (no procps needed)."""
    path = "/proc/sys/" + key.replace(".", "/")
    done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c",
                           f"open({path!r}, 'w').write({value!r})"], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise NamespaceError(f"setting {key} = {value} in {namespace} failed: {done.stderr.strip()[-300:]}")


def namespaces_unavailable() -> Optional[str]:
    """None when this process can create network namespaces and veth pairs and delay between them (netem or TUN),
    else why not (for a skip message)."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "needs the `ip` command (Debian package iproute2)"
    probe = f"bwprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        try:
            _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        finally:
            _ip("netns", "del", probe, check=False)
    except NamespaceError as exc:
        return str(exc)
    if not os.path.exists("/dev/net/tun") and not netem_available():
        return "delays need the netem qdisc or /dev/net/tun (the relay's TUN devices), and this kernel has neither"
    return None


def netem_available() -> bool:
    """Whether the kernel has the netem qdisc (tried on a veth pair inside a throw-away namespace)."""
    if shutil.which("tc") is None:
        return False
    probe = f"bwnetem{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except NamespaceError:
        return False
    try:
        _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        done = subprocess.run(["tc", "-n", probe, "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms"],
                              capture_output=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
        return done.returncode == 0
    except (NamespaceError, OSError, subprocess.TimeoutExpired):
        return False
    finally:
        _ip("netns", "del", probe, check=False)


# -- the delaying packet relay (runs in the hub namespace) --------------------------------------------------------

def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def relay_packets(devices: Sequence[tuple[str, str, float]]) -> None:
    """Create one TUN device per ``(name, address, one_way_delay_ms)`` in this namespace, print a JSON ready line,
    then forward IPv4 packets between them until SIGTERM: a packet read from device i whose destination is the
    address of device j is written to device j ``delay_i + delay_j`` ms later. Other packets (IPv6, unknown
    destinations) are dropped and counted; the counts go to standard error at exit."""
    fds = [_open_tun(name) for name, _, _ in devices]
    index_of = {bytes(int(x) for x in address.split(".")): i for i, (_, address, _) in enumerate(devices)}
    delays = [delay / 1000.0 for _, _, delay in devices]
    loop = asyncio.new_event_loop()
    queues: dict = {}
    counts = collections.Counter()

    def deliver(pair):
        queue = queues[pair]
        now = loop.time()
        while queue and queue[0][0] <= now:
            _, packet = queue.popleft()
            try:
                os.write(fds[pair[1]], packet)
                counts["forwarded"] += 1
            except OSError:
                counts["write_failed"] += 1
        if queue:
            loop.call_at(queue[0][0], deliver, pair)

    def readable(i):
        while True:
            try:
                packet = os.read(fds[i], 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                counts["read_failed"] += 1
                return
            j = index_of.get(packet[16:20]) if len(packet) >= 20 and packet[0] >> 4 == 4 else None
            if j is None or j == i:
                counts["dropped"] += 1
                continue
            queue = queues.setdefault((i, j), collections.deque())
            if len(queue) >= MAX_QUEUED_PACKETS:
                counts["overflow"] += 1
                continue
            due = loop.time() + delays[i] + delays[j]
            queue.append((due, packet))
            if len(queue) == 1:
                loop.call_at(due, deliver, (i, j))

    for i, fd in enumerate(fds):
        loop.add_reader(fd, readable, i)
    stopped = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stopped.done() or stopped.set_result(None))
    print(json.dumps({"relay": [name for name, _, _ in devices]}), flush=True)
    try:
        loop.run_until_complete(stopped)
    finally:
        for fd in fds:
            os.close(fd)
        loop.close()
        print(json.dumps({"relay_counts": dict(counts)}), file=sys.stderr, flush=True)


# -- the cluster -----------------------------------------------------------------------------------------------

class NetnsCluster:
    """An origin and N peered bloomwise proxies, each in its own network namespace, with emulated delays.

    :param proxy_delays_ms: each proxy's one-way access delay ``d_k`` (repeated cyclically if shorter than N).
    :param origin_delay_ms: the origin's; the round-trip time between namespaces i and j is ``2 (d_i + d_j)``.
    :param emulator: ``"auto"`` (netem where the kernel has it, else the relay), ``"netem"`` or ``"relay"``.
    :param proxy_options: more ``bloomwise proxy`` options, the same for every proxy; unless they say otherwise,
        ``--allow-clients`` and ``--allow-destinations`` are the cluster's network (``NETWORK``): the proxies serve
        its hosts and fetch from them only.

    ``start()`` / ``stop()`` or a context manager; ``proxy_urls``, ``origin_url``, ``namespaces``,
    ``round_trip_ms(i, j)`` (the configured RTT between proxies i and j; ``j=None``: to the origin), ``client(i,
    job)``.
    """

    def __init__(self, num_proxies: int = 3, *, proxy_delays_ms: Sequence[float] = (4.0, 6.0, 10.0),
                 origin_delay_ms: float = 25.0, origin_documents: int = 1000, mean_size: int = 4096,
                 proxy_options: Sequence[str] = (), emulator: str = "auto", startup_timeout: float = 60.0,
                 stderr=None):
        if not 1 <= num_proxies <= 64:
            raise ValueError(f"a namespaced cluster has 1 to 64 proxies, got {num_proxies}")
        if not proxy_delays_ms or any(not 0 <= d <= 10_000 for d in (*proxy_delays_ms, origin_delay_ms)):
            raise ValueError(f"delays are 0 to 10000 ms, got {list(proxy_delays_ms)} and {origin_delay_ms}")
        if emulator not in ("auto", "netem", "relay"):
            raise ValueError(f"emulator must be auto, netem or relay, got {emulator!r}")
        self.num_proxies = num_proxies
        self.delays_ms = [float(origin_delay_ms)] + [float(proxy_delays_ms[i % len(proxy_delays_ms)])
                                                     for i in range(num_proxies)]
        self.origin_documents = origin_documents
        self.mean_size = mean_size
        self.proxy_options = list(proxy_options)
        for option in ("--allow-clients", "--allow-destinations"):  # the cluster's own hosts, and nothing else
            if option not in self.proxy_options:
                self.proxy_options += [option, NETWORK]
        self.requested_emulator = emulator
        self.emulator: Optional[str] = None
        self.startup_timeout = startup_timeout
        self.stderr = stderr
        tag = f"bw{os.getpid() % 100000}"
        self.hub = f"{tag}-hub"
        self.namespaces = [f"{tag}-origin"] + [f"{tag}-p{i}" for i in range(num_proxies)]
        self._created: list[str] = []
        self.relay: Optional[subprocess.Popen] = None
        self.origin: Optional[subprocess.Popen] = None
        self.proxies: list[subprocess.Popen] = []

    @property
    def origin_url(self) -> str:
        return f"http://{host_address(0)}:{ORIGIN_PORT}"

    @property
    def proxy_urls(self) -> list[str]:
        return [f"http://{host_address(i + 1)}:{PROXY_PORT}" for i in range(self.num_proxies)]

    def round_trip_ms(self, i: int, j: Optional[int] = None) -> float:
        """The configured round-trip time between proxy ``i`` and proxy ``j`` (the origin when ``j`` is None)."""
        return 2 * (self.delays_ms[i + 1] + self.delays_ms[0 if j is None else j + 1])

    # -- set-up ------------------------------------------------------------------------------------------------
    def start(self) -> "NetnsCluster":
        try:
            self._make_namespaces()
            self.emulator = self.requested_emulator
            if self.emulator == "auto":
                self.emulator = "netem" if netem_available() else "relay"
            if self.emulator == "netem":
                self._link_with_netem()
            else:
                self._link_with_relay()
            self.origin = self._spawn(0, ["-m", "bloomwise.proxy.origin", "--listen",
                                          f"{host_address(0)}:{ORIGIN_PORT}", "--documents",
                                          str(self.origin_documents), "--mean-size", str(self.mean_size)])
            read_ready_line(self.origin, self.startup_timeout, "the origin")
            self.proxies = [self._spawn(i + 1, self._proxy_args(i)) for i in range(self.num_proxies)]
            for i, process in enumerate(self.proxies):
                read_ready_line(process, self.startup_timeout, f"proxy {i}")
        except BaseException:
            self.stop()
            raise
        return self

    def _make_namespaces(self) -> None:
        for name in [self.hub] + self.namespaces:
            _ip("netns", "del", name, check=False)          # a leftover of a killed run with the same pid
            _ip("netns", "add", name)
            self._created.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        for name in self.namespaces:    # IPv4 only (best effort: the relay drops other packets anyway)
            _set_sysctl(name, "net.ipv6.conf.all.disable_ipv6", "1", check=False)

    def _link_with_netem(self) -> None:
        _set_sysctl(self.hub, "net.ipv4.ip_forward", "1")
        for k, name in enumerate(self.namespaces):
            hub_end, host_end = f"h{k}", f"e{k}"
            _ip("-n", self.hub, "link", "add", hub_end, "type", "veth", "peer", "name", host_end, "netns", name)
            _ip("-n", self.hub, "addr", "add", f"{_hub_side_address(k)}/24", "dev", hub_end)
            _ip("-n", name, "addr", "add", f"{host_address(k)}/24", "dev", host_end)
            _ip("-n", self.hub, "link", "set", hub_end, "up")
            _ip("-n", name, "link", "set", host_end, "up")
            _ip("-n", name, "route", "add", NETWORK, "via", _hub_side_address(k))
            for namespace, device in ((self.hub, hub_end), (name, host_end)):
                done = subprocess.run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "netem",
                                       "delay", f"{self.delays_ms[k]}ms", "limit", str(MAX_QUEUED_PACKETS)],
                                      capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
                if done.returncode != 0:
                    raise NamespaceError(f"netem on {device} in {namespace}: {done.stderr.strip()}")

    def _link_with_relay(self) -> None:
        devices = [(f"t{k}", host_address(k), self.delays_ms[k]) for k in range(len(self.namespaces))]
        self.relay = subprocess.Popen(
            ["ip", "netns", "exec", self.hub, sys.executable, "-m", "bloomwise.proxy.netns", "relay",
             json.dumps(devices)], stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL)
        read_ready_line(self.relay, self.startup_timeout, "the delaying relay")
        for k, name in enumerate(self.namespaces):
            device = f"t{k}"
            _ip("-n", self.hub, "link", "set", device, "netns", name)
            _ip("-n", name, "addr", "add", f"{host_address(k)}/16", "dev", device)
            _ip("-n", name, "link", "set", device, "up")

    def _spawn(self, k: int, args: Sequence[str]) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.namespaces[k], sys.executable, *args],
                                stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL)

    def _proxy_args(self, i: int) -> list[str]:
        args = ["-m", "bloomwise", "proxy", "--listen", f"{host_address(i + 1)}:{PROXY_PORT}", "--name",
                f"proxy-{i}"]
        for j, url in enumerate(self.proxy_urls):
            if j != i:
                args += ["--peer", url]
        return args + self.proxy_options

    # -- use ---------------------------------------------------------------------------------------------------
    def client(self, i: Optional[int], job: dict, timeout: float = 120.0) -> dict:
        """Run :func:`client_job` in proxy ``i``'s namespace (the origin's when None): a client on that host."""
        namespace = self.namespaces[0 if i is None else i + 1]
        try:
            done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "bloomwise.proxy.netns",
                                   "client"], input=json.dumps(job), capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NamespaceError(f"the client in {namespace} did not finish within {timeout} s") from None
        if done.returncode != 0:
            raise NamespaceError(f"the client in {namespace} failed: {done.stderr.strip()[-800:]}")
        return json.loads(done.stdout)

    def describe(self) -> str:
        lines = [f"emulated network: {self.emulator} (round trips: 2 x the sum of the two ends' one-way delays)",
                 f"origin   {self.origin_url}   namespace {self.namespaces[0]}   delay {self.delays_ms[0]:g} ms"]
        for i, url in enumerate(self.proxy_urls):
            lines.append(f"proxy-{i}  {url}   namespace {self.namespaces[i + 1]}   delay {self.delays_ms[i + 1]:g} ms")
        lines += ["", f"try:  ip netns exec {self.namespaces[1]} curl -x {self.proxy_urls[0]} "
                      f"{self.origin_url}/doc/1 -o /dev/null -D -"]
        if self.num_proxies > 1:
            lines.append(f"      ip netns exec {self.namespaces[2]} curl -x {self.proxy_urls[1]} "
                         f"{self.origin_url}/doc/1 -o /dev/null -D -   (a remote hit once the summary arrived)")
            lines.append(f"      ip netns exec {self.namespaces[2]} curl {self.proxy_urls[1]}/bloomwise/stats")
        return "\n".join(lines)

    # -- tear-down ---------------------------------------------------------------------------------------------
    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process (SIGKILL after ``timeout`` s), then delete every namespace this cluster made."""
        stop_processes([p for p in self.proxies + [self.origin, self.relay] if p is not None], timeout)
        self.proxies, self.origin, self.relay = [], None, None
        for name in reversed(self._created):
            _ip("netns", "del", name, check=False)
        self._created = []

    def __enter__(self) -> "NetnsCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- a client on one of the emulated hosts --------------------------------------------------------------------

async def client_job(job: dict) -> dict:
    """``{"get_json": URL}`` -> ``{"json": ...}``; or ``{"proxy": URL, "urls": [...], "concurrency": C,
    "mean_size": S}`` -> ``{"requests": [[url, status, x_cache, peer, seconds, body_ok], ...], "seconds": T}``
    (``body_ok``: the body is the origin's document for that path, checked with ``document_body``)."""
    import aiohttp  # the proxy extra


    timeout = aiohttp.ClientTimeout(total=float(job.get("timeout", 30)))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if "get_json" in job:
            async with session.get(job["get_json"]) as reply:
                return {"json": await reply.json()}
        queue = list(reversed(job["urls"]))
        out = []

        async def worker():
            while queue:
                url = queue.pop()
                started = time.perf_counter()
                async with session.get(url, proxy=job["proxy"]) as reply:
                    body = await reply.read()
                    elapsed = time.perf_counter() - started
                    path = "/" + url.split("/", 3)[3]
                    out.append([url, reply.status, reply.headers.get("X-Cache", ""),
                                reply.headers.get("X-Bloomwise-Peer", ""), elapsed,
                                body == document_body(path, int(job["mean_size"]))])

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(int(job.get("concurrency", 1)))))
        return {"requests": out, "seconds": time.perf_counter() - started}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bloomwise.proxy.netns",
                                     description="the delaying relay and the client of a namespaced cluster")
    commands = parser.add_subparsers(dest="command", required=True)
    relay = commands.add_parser("relay", help="forward packets between TUN devices with delays (in the hub)")
    relay.add_argument("devices", help='JSON: [["name", "address", one_way_delay_ms], ...]')
    commands.add_parser("client", help="run a JSON job read from standard input (see client_job)")
    args = parser.parse_args(argv)
    if args.command == "relay":
        try:
            devices = [(str(n), str(a), float(d)) for n, a, d in json.loads(args.devices)]
        except (ValueError, TypeError) as exc:
            parser.error(f"devices: expected [[name, address, delay_ms], ...]: {exc}")
        relay_packets(devices)
        return 0
    print(json.dumps(asyncio.run(client_job(json.load(sys.stdin)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
