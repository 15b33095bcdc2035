"""Who may use a bloomwise proxy, and where it may fetch: closed by default, as Squid is.

Squid's default configuration answers only localhost (``http_access deny all`` after ``allow localhost``) and
refuses ``to_localhost``; a bloomwise proxy does the same with two lists:

- **clients** (``--allow-clients CIDR,...``): the addresses allowed to use the proxy. Default: loopback only
  (127.0.0.0/8 and ::1). Anyone else gets 403 with a one-line reason. The configured peers' addresses may in
  addition ask peer queries (``Cache-Control: only-if-cached``) and read the peer endpoints (summary, notify, the
  Squid digest, stats, metrics), but not fetch through the proxy.
- **destinations** (``--allow-destinations HOST|CIDR[:PORTS],...``): where the proxy fetches. A rule is a host name
  (``example.com``; ``.example.com`` also matches every subdomain), an address or a network in CIDR form
  (``10.0.0.0/8``, ``[fd00::/8]`` in brackets when a port follows), optionally followed by ``:PORT`` or
  ``:LOW-HIGH``. A host name is resolved before the fetch and **every** address it resolves to must be allowed (a
  host-name rule allows the name's addresses, whatever they are; a network rule is checked against them). Default
  (no list): anything except :data:`DEFAULT_DENIED_NETWORKS` (loopback, "this network", link-local with the cloud
  metadata service 169.254.169.254, and the IPv6 equivalents): the services on the proxy's own host and the
  metadata endpoints that hand out cloud credentials are the first thing an open proxy is abused for.
- The proxy's own listening address and port is never a destination (a request to itself would loop).

The connection itself is checked too, not only the name in the URL: the client session that fetches from
origins resolves through :class:`GuardedResolver`, so a name that resolves to an allowed address when checked and
to a denied one when connecting (DNS rebinding) is refused at the connection.

>>> policy = DestinationPolicy.parse("127.0.0.1:8000-8999,.example.com:80")
>>> policy.refusal("127.0.0.1", 8080, ["127.0.0.1"]) is None, policy.refusal("127.0.0.1", 22, ["127.0.0.1"])
(True, '127.0.0.1:22 is not an allowed destination (--allow-destinations 127.0.0.1:8000-8999,.example.com:80)')
>>> DestinationPolicy().refusal("metadata", 80, ["169.254.169.254"])
'metadata:80 resolves to 169.254.169.254, which is a denied address (169.254.0.0/16; allow it with --allow-destinations)'
>>> ClientPolicy().allows("127.0.0.5"), ClientPolicy().allows("10.1.2.3")
(True, False)
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

__all__ = ["ClientPolicy", "DestinationPolicy", "DestinationRule", "GuardedResolver", "DEFAULT_CLIENT_NETWORKS",
           "DEFAULT_DENIED_NETWORKS", "normalize_address"]

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

#: answers remembered (client addresses; checked destinations, for DESTINATION_CHECK_SECONDS) before the memo is
#: emptied: a bound on memory, whatever clients and URLs arrive
MEMO_ENTRIES = 4096
#: seconds a destination check (its name resolution) is reused; the connection is checked again by GuardedResolver
DESTINATION_CHECK_SECONDS = 30.0

#: the clients allowed when ``--allow-clients`` is not given: loopback only
DEFAULT_CLIENT_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("127.0.0.0/8", "::1/128"))

#: the destinations refused when ``--allow-destinations`` is not given
DEFAULT_DENIED_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8",          # "this network" (0.0.0.0 reaches the local host on Linux)
    "127.0.0.0/8",        # loopback: services of the proxy's own host
    "169.254.0.0/16",     # link-local, with the cloud metadata service 169.254.169.254
    "::/128", "::1/128",  # unspecified, loopback
    "fe80::/10",          # link-local
    "fd00:ec2::254/128",  # AWS's IPv6 metadata service
))


def normalize_address(text: str):
    """An ``ip_address`` from text (an IPv4-mapped IPv6 address becomes its IPv4 address; a zone id is dropped)."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _network(text: str, what: str) -> Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{what} {text.strip()!r} is not an address or a network in CIDR form "
                         f"(examples: 10.0.0.0/8, 192.168.1.7, ::1, fd00::/8)") from None


def _split(text: str) -> list[str]:
    return [part.strip() for part in str(text).split(",") if part.strip()]


class ClientPolicy:
    """The client addresses allowed to use the proxy (default: loopback).

    :param networks: CIDR networks (``ip_network``); None: :data:`DEFAULT_CLIENT_NETWORKS`.
    """

    def __init__(self, networks: Optional[Sequence[Network]] = None):
        self.networks = tuple(DEFAULT_CLIENT_NETWORKS if networks is None else networks)
        self._memo: dict = {}

    @classmethod
    def parse(cls, text: str) -> "ClientPolicy":
        """``CIDR,CIDR,...`` (``--allow-clients``); ValueError naming the part that is not a network."""
        parts = _split(text)
        if not parts:
            raise ValueError(f"--allow-clients {text!r} names no network (example: 127.0.0.1/32,10.0.0.0/8)")
        return cls([_network(part, "--allow-clients") for part in parts])

    def allows(self, address: Optional[str]) -> bool:
        """Whether a client at ``address`` (text, as the socket reports it) may use the proxy."""
        if not address:
            return False  # a unix socket or an unknown peer: not a listed address
        allowed = self._memo.get(address)
        if allowed is None:
            try:
                ip = normalize_address(address)
            except ValueError:
                return False
            allowed = any(ip in network for network in self.networks)
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            self._memo[address] = allowed
        return allowed

    def describe(self) -> str:
        return ",".join(str(n) for n in self.networks)


@dataclass(frozen=True)
class DestinationRule:
    """One ``--allow-destinations`` entry: a host name (``.suffix`` for subdomains too) or a network, and ports."""

    host: Optional[str]
    network: Optional[Network]
    low_port: int = 1
    high_port: int = 65535

    def matches_port(self, port: int) -> bool:
        return self.low_port <= port <= self.high_port

    def matches_name(self, host: str) -> bool:
        if self.host is None:
            return False
        name = host.lower().rstrip(".")
        if self.host.startswith("."):
            return name == self.host[1:] or name.endswith(self.host)
        return name == self.host

    @classmethod
    def parse(cls, text: str) -> "DestinationRule":
        raw = text.strip()
        ports = None
        if raw.startswith("["):                       # [v6 or v6/len]:PORTS
            inside, sep, rest = raw[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"--allow-destinations {text!r}: an IPv6 entry is [ADDRESS]:PORTS or [NETWORK]")
            target, ports = inside, (rest[1:] if rest else None)
        elif raw.count(":") > 1:                      # a bare IPv6 address or network, no port
            target = raw
        else:
            target, sep, port_text = raw.partition(":")
            ports = port_text if sep else None
        if not target:
            raise ValueError(f"--allow-destinations {text!r} names no host or network")
        low, high = _ports(ports, text) if ports is not None else (1, 65535)
        try:
            network = ipaddress.ip_network(target, strict=False)
        except ValueError:
            network = None
        if network is not None:
            return cls(None, network, low, high)
        name = target.lower().rstrip(".")
        label = name[1:] if name.startswith(".") else name
        if not label or any(not part or not all(c.isalnum() or c in "-_" for c in part) for part in label.split(".")) \
                or "/" in name:
            raise ValueError(f"--allow-destinations {text!r}: {target!r} is neither a host name, an address nor a "
                             f"network (examples: origin.example.com:80, .example.com, 10.0.0.0/8:80-89, "
                             f"127.0.0.1, [::1]:8080)")
        return cls(name, None, low, high)

    def __str__(self) -> str:
        if self.host is not None:
            target = self.host
        else:
            single = self.network.prefixlen == self.network.max_prefixlen
            target = str(self.network.network_address if single else self.network)
        if (self.low_port, self.high_port) == (1, 65535):
            return target
        ports = str(self.low_port) if self.low_port == self.high_port else f"{self.low_port}-{self.high_port}"
        return f"[{target}]:{ports}" if self.network is not None and self.network.version == 6 else f"{target}:{ports}"


def _ports(text: str, whole: str) -> tuple[int, int]:
    low_text, sep, high_text = text.partition("-")
    try:
        low = int(low_text)
        high = int(high_text) if sep else low
    except ValueError:
        low = high = -1
    if not (1 <= low <= high <= 65535):
        raise ValueError(f"--allow-destinations {whole!r}: ports {text!r} must be PORT or LOW-HIGH in 1..65535")
    return low, high


class DestinationPolicy:
    """Where the proxy may fetch.

    :param rules: the allowed destinations (:class:`DestinationRule`); None: anything but
        :data:`DEFAULT_DENIED_NETWORKS`.
    :param own_endpoints: (address, port) pairs the proxy listens on: never destinations.
    """

    def __init__(self, rules: Optional[Sequence[DestinationRule]] = None, own_endpoints: Iterable = ()):
        self.rules = None if rules is None else tuple(rules)
        self.own_endpoints = set()
        self._memo: dict = {}
        self.add_own_endpoints(own_endpoints)

    @classmethod
    def parse(cls, text: str) -> "DestinationPolicy":
        parts = _split(text)
        if not parts:
            raise ValueError(f"--allow-destinations {text!r} names no destination (example: 127.0.0.1,10.0.0.0/8:80)")
        return cls([DestinationRule.parse(part) for part in parts])

    def add_own_endpoints(self, endpoints: Iterable) -> None:
        """Never fetch from these (address, port) pairs. A wildcard address (0.0.0.0, ::) stands for the host's own
        addresses: loopback and the addresses its host name resolves to."""
        for address, port in endpoints:
            try:
                ip = normalize_address(address)
            except ValueError:
                continue
            if ip.is_unspecified:
                for own in _own_host_addresses():
                    self.own_endpoints.add((own, int(port)))
            else:
                self.own_endpoints.add((ip, int(port)))
        self._memo.clear()

    def describe(self) -> str:
        if self.rules is None:
            return "any address except " + ", ".join(str(n) for n in DEFAULT_DENIED_NETWORKS)
        return ",".join(str(rule) for rule in self.rules)

    def refusal(self, host: str, port: int, addresses: Sequence[str]) -> Optional[str]:
        """None if ``host:port``, which resolved to ``addresses``, may be fetched; otherwise the reason (one line)."""
        where = f"{host}:{port}"
        if not addresses:
            return f"{where} resolves to no address"
        ips = []
        for text in addresses:
            try:
                ips.append(normalize_address(text))
            except ValueError:
                return f"{where} resolves to {text!r}, which is not an IP address"
        for ip in ips:
            if (ip, port) in self.own_endpoints:
                return f"{where} is this proxy itself"
        if self.rules is None:
            for ip in ips:
                for network in DEFAULT_DENIED_NETWORKS:
                    if ip in network:
                        via = "" if str(ip) == host.strip("[]") else f" resolves to {ip}, which"
                        return (f"{where}{via} is a denied address ({network}; allow it with "
                                f"--allow-destinations)")
            return None
        by_name = [r for r in self.rules if r.matches_name(host) and r.matches_port(port)]
        if by_name:
            return None
        for ip in ips:
            if not any(r.network is not None and ip in r.network and r.matches_port(port) for r in self.rules):
                return f"{where} is not an allowed destination (--allow-destinations {self.describe()})"
        return None

    def recent_check(self, host: str, port: int) -> Optional[tuple[Optional[str], list[str]]]:
        """:meth:`check`'s answer when it is remembered and still valid (no resolution, no await), else None."""
        memo = self._memo.get((host, port))
        if memo is not None and time.monotonic() - memo[0] < DESTINATION_CHECK_SECONDS:
            return memo[1], memo[2]
        return None

    async def check(self, host: str, port: int) -> tuple[Optional[str], list[str]]:
        """Resolve ``host`` and check ``host:port``: (the refusal or None, the addresses); an answer is reused for
        ``DESTINATION_CHECK_SECONDS``."""
        now = time.monotonic()
        memo = self._memo.get((host, port))
        if memo is not None and now - memo[0] < DESTINATION_CHECK_SECONDS:
            return memo[1], memo[2]
        addresses = await resolve(host, port)
        refusal = self.refusal(host, port, addresses)
        if not addresses:  # a resolution that failed may succeed on the next request
            return refusal, addresses
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        self._memo[(host, port)] = (now, refusal, addresses)
        return refusal, addresses


def _own_host_addresses() -> set:
    """Loopback and the addresses of this host's name (best effort: what a wildcard listening socket answers on)."""
    addresses = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        infos = []
    for info in infos:
        try:
            addresses.add(normalize_address(info[4][0]))
        except ValueError:
            continue
    return addresses


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (an address resolves to itself); [] when it does not resolve."""
    bare = host.strip("[]")
    try:
        return [str(ipaddress.ip_address(bare))]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(info[4][0] for info in infos))


class GuardedResolver:
    """An aiohttp resolver that resolves as aiohttp's default one does, then drops every address the destination
    policy refuses (and raises ``OSError`` when none is left): the connection goes only where the check said."""

    def __init__(self, policy: DestinationPolicy):
        from aiohttp.resolver import DefaultResolver

        self.policy = policy
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        infos = await self._inner.resolve(host, port, family)
        allowed = [info for info in infos if self.policy.refusal(host, port, [info["host"]]) is None]
        if not allowed:
            reason = self.policy.refusal(host, port, [info["host"] for info in infos])
            raise OSError(f"refused by the destination policy: {reason}")
        return allowed

    async def close(self) -> None:
        await self._inner.close()
