"""DocumentCache: one proxy's byte-bounded document cache and the counting filter that summarises it.

Summary Cache (Fan, Cao, Almeida and Broder, *Summary Cache: A Scalable Wide-Area Web Cache Sharing Protocol*,
section V) keeps, beside each proxy's cache, a counting Bloom filter of the cached URLs: every document stored
increments its key's k counters, every document evicted or removed decrements them, so the filter's bit view
(counter > 0) is always a Bloom filter of exactly the cached keys, and it is that bit view (or, for the Bloom-paradox
routing, the counters themselves) that the proxy sends its peers. Invariant: ``key in cache`` implies
``key in cache.filter``.

Sizing (the paper's "load factor"): the filter has ``bits_per_entry`` 4-bit counters per expected document, and
``expected_entries`` defaults to ``capacity_bytes / AVERAGE_DOCUMENT_SIZE`` (8 KiB, the average Web document size
Summary Cache assumes when it sizes summaries from the cache size). ``k`` is the integer that minimises the false
positive rate at that load, ``theory.optimal_num_hashes`` (about ``bits_per_entry * ln 2``). A byte-bounded cache
holds however many documents their sizes allow, not the expected number: :meth:`DocumentCache.resize_filter`
rebuilds the filter for the number actually cached (the summary publisher calls it when the load drifted, see
``SummaryPublisher(resize_tolerance=...)``).

Eviction is pluggable (:class:`EvictionPolicy`); ``"lru"`` (the default, as in Summary Cache's simulations) and
``"fifo"`` are built in. Every operation is O(1) apart from the filter's k counter updates.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Optional

from bloomwise import theory
from bloomwise._checks import check_positive_int
from bloomwise.counting import CountingBloomFilter

__all__ = ["AVERAGE_DOCUMENT_SIZE", "Document", "DocumentCache", "EvictionPolicy", "LRUPolicy", "FIFOPolicy",
           "EVICTION_POLICIES", "filter_geometry"]

#: bytes; the average document size used to turn a cache size into a number of summary entries (Summary Cache).
AVERAGE_DOCUMENT_SIZE = 8192


class Document:
    """One cached response: ``key`` ("METHOD URL"), ``size`` in bytes, optional ``body`` and ``headers``, and
    ``stored_at`` (``time.time()`` when stored, unless the caller gave another clock value)."""

    __slots__ = ("key", "size", "body", "headers", "stored_at")

    def __init__(self, key: str, size: int, body: Optional[bytes] = None, headers: Optional[dict] = None,
                 stored_at: float = 0.0):
        self.key = key
        self.size = size
        self.body = body
        self.headers = headers
        self.stored_at = stored_at

    def __repr__(self) -> str:
        body = "" if self.body is None else f", body={len(self.body)} bytes"
        return f"Document({self.key!r}, size={self.size}{body})"


class EvictionPolicy:
    """Which cached key to evict next. The cache calls ``insert(key)`` when a key is stored, ``touch(key)`` on a
    hit, ``remove(key)`` when it leaves for another reason, and ``victim()`` (which must return a key it holds,
    without forgetting it: the cache then calls ``remove``) when it needs room."""

    name = "abstract"

    def insert(self, key) -> None:
        raise NotImplementedError

    def touch(self, key) -> None:
        raise NotImplementedError

    def remove(self, key) -> None:
        raise NotImplementedError

    def victim(self):
        raise NotImplementedError


class LRUPolicy(EvictionPolicy):
    """Least recently used: a hit moves the key to the young end; the victim is the oldest. O(1) each."""

    name = "lru"
    __slots__ = ("_order",)

    def __init__(self):
        self._order: OrderedDict = OrderedDict()

    def insert(self, key) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def touch(self, key) -> None:
        self._order.move_to_end(key)

    def remove(self, key) -> None:
        del self._order[key]

    def victim(self):
        return next(iter(self._order))


class FIFOPolicy(LRUPolicy):
    """First in, first out: hits do not change the order (a re-stored key keeps its place)."""

    name = "fifo"
    __slots__ = ()

    def insert(self, key) -> None:
        self._order[key] = None

    def touch(self, key) -> None:
        pass


#: ``eviction=`` names
EVICTION_POLICIES = {"lru": LRUPolicy, "fifo": FIFOPolicy}


def filter_geometry(bits_per_entry: int, expected_entries: int, layout: str = "partitioned") -> tuple:
    """``(m, k)`` of a cache's counting filter sized for ``expected_entries`` documents: ``m = max(bits_per_entry *
    expected_entries, 2)`` counters and the k that minimises the false-positive rate at that load
    (``theory.optimal_num_hashes``).

    >>> filter_geometry(8, 1000)
    (8000, 6)
    """
    num_counters = max(bits_per_entry * expected_entries, 2)
    return num_counters, theory.optimal_num_hashes(num_counters, expected_entries, layout=layout)


class DocumentCache:
    """A cache of documents bounded by their total size in bytes, with its counting Bloom filter.

    :param capacity_bytes: the most bytes of documents held at once (>= 1).
    :param eviction: ``"lru"`` (default), ``"fifo"``, or an :class:`EvictionPolicy` instance.
    :param bits_per_entry: counters per expected document (the summary's bits per entry when sent as bits), >= 1;
        :meth:`resize_filter` changes the expected number.
    :param expected_entries: documents the filter is sized for; default ``max(1, capacity_bytes // 8192)``.
    :param seed: the filter's hash seed (peers must agree on nothing: each summary carries its own parameters).
    :param layout: the filter's layout, ``"partitioned"`` (default: the model of the Bloom-paradox paper's
        Theorem 2, for which its posterior is exact) or ``"classic"``.

    >>> cache = DocumentCache(1000, bits_per_entry=8, expected_entries=10)
    >>> cache.put("GET http://a/", 600), cache.put("GET http://b/", 300)
    ([], [])
    >>> cache.get("GET http://a/").size           # a hit: "a" becomes the most recently used
    600
    >>> cache.put("GET http://c/", 200)           # 1100 bytes > 1000: the least recently used goes
    ['GET http://b/']
    >>> "GET http://b/" in cache, "GET http://b/" in cache.filter, cache.used_bytes
    (False, False, 800)
    """

    def __init__(self, capacity_bytes: int, *, eviction="lru", bits_per_entry: int = 8,
                 expected_entries: Optional[int] = None, seed: int = 0, layout: str = "partitioned"):
        self._capacity = check_positive_int("capacity_bytes", capacity_bytes)
        self.bits_per_entry = check_positive_int("bits_per_entry", bits_per_entry)
        if expected_entries is None:
            expected_entries = max(1, self._capacity // AVERAGE_DOCUMENT_SIZE)
        self.expected_entries = check_positive_int("expected_entries", expected_entries)
        if isinstance(eviction, EvictionPolicy):
            self._policy = eviction
        elif eviction in EVICTION_POLICIES:
            self._policy = EVICTION_POLICIES[eviction]()
        else:
            raise ValueError(f"eviction must be one of {', '.join(map(repr, EVICTION_POLICIES))} or an "
                             f"EvictionPolicy, got {eviction!r}")
        self._layout, self._seed = layout, seed
        self.filter = self._new_filter(self.expected_entries)
        self._docs: dict = {}
        self._used = 0
        #: documents added plus documents removed or evicted, since the cache was made (changes of the key set)
        self.changes = 0
        #: documents stored that were not cached before, since the cache was made (what a summary publisher
        #: compares with the update threshold: Summary Cache's "new documents")
        self.new_documents = 0

    def _new_filter(self, expected_entries: int) -> CountingBloomFilter:
        num_counters, num_hashes = filter_geometry(self.bits_per_entry, expected_entries, self._layout)
        return CountingBloomFilter.from_size(num_counters, num_hashes, counter_bits=4, layout=self._layout,
                                             seed=self._seed)

    def resize_filter(self, expected_entries: int) -> None:
        """Rebuild the counting filter for ``expected_entries`` documents (``bits_per_entry`` counters each, k optimal
        for that load) holding exactly the cached keys. ``filter`` becomes a new object: holders of the old one (a
        summary publisher's journal mark) must start over. O(documents cached), in compiled code."""
        expected_entries = check_positive_int("expected_entries", expected_entries)
        fresh = self._new_filter(expected_entries)
        if self._docs:
            fresh.update(list(self._docs))
        self.filter = fresh
        self.expected_entries = expected_entries

    # -- reading ---------------------------------------------------------------------------------------------------
    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @property
    def used_bytes(self) -> int:
        """Bytes of documents held now (never more than ``capacity_bytes``)."""
        return self._used

    @property
    def num_documents(self) -> int:
        return len(self._docs)

    @property
    def eviction(self) -> str:
        return self._policy.name

    def __contains__(self, key) -> bool:
        return key in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def keys(self):
        """The cached keys (a view: do not change the cache while iterating)."""
        return self._docs.keys()

    def get(self, key) -> Optional[Document]:
        """The document, or None; a hit counts as a use for the eviction policy."""
        doc = self._docs.get(key)
        if doc is not None:
            self._policy.touch(key)
        return doc

    def peek(self, key) -> Optional[Document]:
        """The document, or None, without counting a use."""
        return self._docs.get(key)

    # -- writing ---------------------------------------------------------------------------------------------------
    def put(self, key, size: int, body: Optional[bytes] = None, headers: Optional[dict] = None, *,
            stored_at: Optional[float] = None) -> list:
        """Store a document (replacing one of the same key); returns the keys evicted to make room.

        A document larger than the whole capacity is not stored (an older copy of the key is removed, and listed).
        ``size`` is the document's size in bytes (>= 0); ``stored_at`` defaults to ``time.time()``.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        docs = self._docs
        old = docs.get(key)
        now = time.time() if stored_at is None else stored_at
        if size > self._capacity:
            return [key] if self.remove(key) else []
        if old is not None:  # same key: its counters stay; only the size and content change
            self._used += size - old.size
            old.size, old.body, old.headers, old.stored_at = size, body, headers, now
            self._policy.touch(key)
            return self._make_room(key)
        docs[key] = Document(key, size, body, headers, now)
        self._used += size
        self._policy.insert(key)
        self.filter.add(key)
        self.changes += 1
        self.new_documents += 1
        return self._make_room(key) if self._used > self._capacity else []

    def _make_room(self, keep) -> list:
        evicted = []
        policy, docs, filt = self._policy, self._docs, self.filter
        while self._used > self._capacity:
            victim = policy.victim()
            if victim == keep:  # never evict what is being stored (it fits alone: put checked), take the next
                policy.remove(keep)
                policy.insert(keep)
                victim = policy.victim()
            policy.remove(victim)
            doc = docs.pop(victim)
            self._used -= doc.size
            filt.remove(victim)
            self.changes += 1
            evicted.append(victim)
        return evicted

    def remove(self, key) -> bool:
        """Drop a document; True when it was cached."""
        doc = self._docs.pop(key, None)
        if doc is None:
            return False
        self._policy.remove(key)
        self._used -= doc.size
        self.filter.remove(key)
        self.changes += 1
        return True

    def clear(self) -> None:
        """Remove every document (each one leaves the filter, so the change count grows by their number)."""
        for key in list(self._docs):
            self.remove(key)

    def __repr__(self) -> str:
        return (f"<DocumentCache {self.eviction}: {len(self._docs):,} documents, {self._used:,} of "
                f"{self._capacity:,} bytes, filter {self.filter.num_cells:,} counters k={self.filter.num_hashes}>")
