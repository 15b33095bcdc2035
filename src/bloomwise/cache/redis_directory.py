"""A summary directory in Redis: proxies publish their summaries to one Redis (or Valkey) server and read their
peers' from it, instead of sending them to each peer over HTTP.

A publication costs one transaction whatever the number of peers, and a proxy that starts, restarts or was away
catches up from the directory alone. What is stored, for a directory ``PREFIX`` and a node ``NAME``:

- ``PREFIX:nodes``: a set of the node names that publish;
- ``PREFIX:node:NAME:whole``: the node's latest summary as a whole ``SummaryUpdate`` (its exact wire bytes);
- ``PREFIX:node:NAME:deltas``: a hash, version -> the wire bytes of the delta that produced that version from the
  one before, for the last ``history`` versions (older ones are deleted).

The whole summary, its delta and the trimming of old deltas are written in one MULTI/EXEC, so a reader sees either
the version before or the one after. A reader holding version v asks for the deltas v+1 .. latest; if one is missing
(too old, or the publisher restarted: another origin id) it takes the whole summary. Everything read is parsed by
``SummaryUpdate.from_bytes`` (bounded, checked: FormatError on bad bytes), like a summary received over HTTP.

>>> # directory = RedisSummaryDirectory(redis.Redis(unix_socket_path=...), "cluster-a")
>>> # directory.sync(node)       # publish this node's summary if due, then apply every peer's news
"""
from __future__ import annotations

from typing import Optional

from bloomwise.cache.summary import DEFAULT_MAX_SUMMARY_BYTES, SummaryGap, SummaryUpdate
from bloomwise.errors import FormatError
from bloomwise.redis.errors import call_server, redis_module, server_error

__all__ = ["RedisSummaryDirectory", "AsyncRedisSummaryDirectory"]


class RedisSummaryDirectory:
    """Summaries of a group of CacheNodes kept in Redis under ``prefix``.

    :param client: a ``redis.Redis`` (``AsyncRedisSummaryDirectory``: a ``redis.asyncio.Redis``).
    :param prefix: the directory's key prefix (one per group of cooperating proxies).
    :param history: how many deltas each node keeps (a reader further behind takes the whole summary).
    :param max_size: the largest summary update accepted (bytes), as for a summary received over HTTP.
    """

    def __init__(self, client, prefix: str = "bloomwise:summaries", *, history: int = 16,
                 max_size: int = DEFAULT_MAX_SUMMARY_BYTES):
        if not isinstance(prefix, str) or not prefix:
            raise TypeError(f"prefix must be a non-empty str, got {prefix!r}")
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        self.client = client
        self.prefix = prefix
        self.history = history
        self.max_size = max_size

    def _key(self, name: str, what: str) -> str:
        return f"{self.prefix}:node:{name}:{what}"

    # -- I/O ---------------------------------------------------------------------------------------------------------
    # Each operation is a generator of steps: it yields (doing, method, args) for one client call, or (doing,
    # "pipeline", fill) for a MULTI/EXEC pipeline that ``fill(pipe)`` queues, and receives the reply. ``_run`` does
    # the calls with redis-py; AsyncRedisSummaryDirectory awaits them with redis.asyncio.
    def _run(self, steps):
        try:
            request = next(steps)
            while True:
                doing, method, argument = request
                if method == "pipeline":
                    pipe = self.client.pipeline(transaction=True)
                    argument(pipe)
                    reply = call_server(self.client, doing, pipe.execute)
                else:
                    reply = call_server(self.client, doing, getattr(self.client, method), *argument)
                request = steps.send(reply)
        except StopIteration as stop:
            return stop.value

    # -- publishing ------------------------------------------------------------------------------------------------
    def publish(self, name: str, update: SummaryUpdate, whole: Optional[SummaryUpdate] = None) -> int:
        """Store node ``name``'s new summary version: ``update`` (a delta or a whole summary) and ``whole``, the
        same version as a whole summary (needed when ``update`` is a delta). Returns the bytes written."""
        return self._run(self._publish(name, update, whole))

    def _publish(self, name, update, whole):
        whole = update if not update.is_delta else whole
        if whole is None or whole.is_delta or whole.version != update.version:
            raise ValueError("publish needs the new version as a whole summary too (node.whole_summary())")
        written = whole.nbytes + (update.nbytes if update.is_delta else 0)
        deltas = self._key(name, "deltas")

        def fill(pipe):
            pipe.sadd(f"{self.prefix}:nodes", name)
            pipe.set(self._key(name, "whole"), whole.to_bytes())
            if update.is_delta:
                pipe.hset(deltas, str(update.version), update.to_bytes())
                stale = [str(v) for v in range(max(0, update.version - 2 * self.history),
                                               update.version - self.history + 1)]
                if stale:
                    pipe.hdel(deltas, *stale)
            else:
                pipe.delete(deltas)  # a whole summary (first, or after a restart) starts a new chain

        yield f"publishing the summary of {name!r}", "pipeline", fill
        return written

    def publish_node(self, node, *, whole: bool = False) -> int:
        """Publish a CacheNode's next summary version (``node.publish_summary``); returns the bytes written."""
        return self._run(self._publish_node(node, whole))

    def _publish_node(self, node, whole):
        update = node.publish_summary(whole=whole)
        written = yield from self._publish(node.name, update, None if not update.is_delta else node.whole_summary())
        node.summaries_out += 1
        node.summary_bytes_out += written
        return written

    # -- reading -----------------------------------------------------------------------------------------------------
    def nodes(self) -> set:
        """The names of the nodes that published to this directory."""
        return self._run(self._nodes())

    def _nodes(self):
        raw = yield "listing the summary directory", "smembers", (f"{self.prefix}:nodes",)
        return {n.decode() if isinstance(n, bytes) else n for n in raw}

    def whole(self, name: str) -> Optional[SummaryUpdate]:
        """Node ``name``'s latest summary as a whole, or None when it never published."""
        return self._run(self._whole(name))

    def _whole(self, name):
        data = yield f"reading the summary of {name!r}", "get", (self._key(name, "whole"),)
        return None if data is None else SummaryUpdate.from_bytes(data, max_size=self.max_size)

    def updates_since(self, name: str, version: Optional[int], origin: Optional[int] = None) -> list:
        """What brings a copy of node ``name``'s summary at ``version`` (from ``origin``) up to date: the deltas in
        order, or [the whole summary] when they are not all there; [] when it is current or nothing was published."""
        return self._run(self._updates_since(name, version, origin))

    def _updates_since(self, name, version, origin):
        latest = yield from self._whole(name)
        if latest is None or (version is not None and latest.version == version and latest.origin == origin):
            return []
        if version is None or origin != latest.origin or not version < latest.version:
            return [latest]
        wanted = [str(v) for v in range(version + 1, latest.version + 1)]
        raw = yield f"reading the summary deltas of {name!r}", "hmget", (self._key(name, "deltas"), wanted)
        if any(data is None for data in raw):
            return [latest]
        deltas = [SummaryUpdate.from_bytes(data, max_size=self.max_size) for data in raw]
        if deltas[-1].version != latest.version or deltas[-1].origin != latest.origin:
            return [latest]  # a publication between our two reads: the whole summary is consistent
        return deltas

    def sync(self, node, *, publish_if_due: bool = True) -> dict:
        """Publish ``node``'s summary when due (``node.summary_due()``; the first time always), add every other
        node of the directory as a peer, and apply their news.

        One bad publisher does not stop the others: a peer whose stored summary is damaged (``FormatError``) or does
        not fit (``SummaryGap`` even from its whole summary) is skipped, its summary held as it was, and named in
        ``skipped``. Returns {"published": bytes, "received": bytes, "skipped": {name: reason}}.
        """
        return self._run(self._sync(node, publish_if_due))

    def _sync(self, node, publish_if_due):
        published = 0
        if publish_if_due and (node.summary_due() or node.publisher.current_version == 0
                               or (yield from self._whole(node.name)) is None):
            published = yield from self._publish_node(node, False)
        received = 0
        skipped = {}
        known = {peer.peer_id for peer in node.peers}
        for name in sorted((yield from self._nodes()) - {node.name}):
            if name not in known:
                node.add_peer(name)
            try:
                received += yield from self._catch_up(node, name)
            except (FormatError, SummaryGap) as exc:
                skipped[name] = f"{type(exc).__name__}: {exc}"
        return {"published": published, "received": received, "skipped": skipped}

    def _catch_up(self, node, name: str):
        """Steps: apply publisher ``name``'s news to ``node``; returns the bytes received."""
        held = node.peer(name).summary
        version = None if held is None else held.version
        origin = None if held is None else held.origin
        received = 0
        for update in (yield from self._updates_since(name, version, origin)):
            try:
                node.receive_summary(name, update)
            except SummaryGap:  # the chain does not fit what is held: start again from the whole summary
                latest = yield from self._whole(name)
                if latest is None:
                    break
                node.receive_summary(name, latest)
                return received + latest.nbytes
            received += update.nbytes
        return received


class AsyncRedisSummaryDirectory(RedisSummaryDirectory):
    """The same directory over a ``redis.asyncio.Redis``: every method returns an awaitable
    (``await directory.sync(node)``), with the same keys, transactions and checks (the operations are shared)."""

    def _run(self, steps):
        return self._run_async(steps)

    async def _run_async(self, steps):
        redis = redis_module()
        try:
            request = next(steps)
            while True:
                doing, method, argument = request
                try:
                    if method == "pipeline":
                        pipe = self.client.pipeline(transaction=True)
                        argument(pipe)
                        reply = await pipe.execute()
                    else:
                        reply = await getattr(self.client, method)(*argument)
                except redis.exceptions.RedisError as exc:
                    raise server_error(self.client, exc, doing) from exc
                request = steps.send(reply)
        except StopIteration as stop:
            return stop.value
