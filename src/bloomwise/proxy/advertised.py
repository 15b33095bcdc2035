"""The documents a proxy advertises to its peers: those that will still be fresh when a peer acts on the summary.

A peer routes by the last summary it received, so a key advertised must stay fresh as long as that version can be
in use; otherwise the peer is sent after a copy it will be refused (a false hit that no Bloom filter caused). Squid
leaves such entries out of its digest (a stored entry that expires before the next digest rebuild is not added).
A bloomwise proxy keeps every fresh document in its cache for local hits, but its summary is built from this set:

- a document is advertised when stored only if it stays fresh for more than the *horizon* H from now;
- every ``sweep`` seconds, the documents whose freshness ends within H are withdrawn, and a summary leaving them
  out is published at once (and notified);
- a document evicted, purged or found stale is withdrawn with it.

With sweeps every S seconds, publication at most ``min_publish_interval`` (m) after a withdrawal, and a summary
reaching the peers within D (a notify at once; a lost notify: the next pull, ``summary_interval``), a key of expiry E
is gone from every peer's summary before E - H + S + m + D, so ``H = S + m + summary_interval`` keeps every advertised
document fresh while advertised (the proxy's configuration computes it so).

The set is what the proxy's :class:`~bloomwise.cache.summary.SummaryPublisher` summarises: it offers what the
publisher reads of a :class:`~bloomwise.cache.store.DocumentCache` (``filter``, a counting Bloom filter sized as the
cache's; ``changes``; ``new_documents``; ``len``; ``expected_entries`` and ``resize_filter`` for a publisher that
re-sizes), so the summary's wire form and deltas are unchanged.

>>> from bloomwise.cache import DocumentCache
>>> ads = AdvertisedSet(DocumentCache(2**20, bits_per_entry=8, expected_entries=100))
>>> ads.advertise("GET http://a/", expires_at=100.0, now=0.0, horizon=10.0), "GET http://a/" in ads.filter
(True, True)
>>> ads.advertise("GET http://b/", expires_at=105.0, now=96.0, horizon=10.0)   # stale within the horizon
False
>>> ads.withdraw_expiring(now=91.0), len(ads), ads.changes, ads.new_documents
(['GET http://a/'], 0, 2, 1)
"""
from __future__ import annotations

import heapq

from bloomwise import theory
from bloomwise.counting import CountingBloomFilter

__all__ = ["AdvertisedSet"]


class AdvertisedSet:
    """Keys advertised in a proxy's summary, each until its freshness comes within the horizon of its end.

    :param cache: the proxy's DocumentCache: this set's filter is sized as the cache's (``bits_per_entry`` 4-bit
        counters per expected document, the same layout, seed and hash scheme).
    """

    def __init__(self, cache):
        like = cache.filter
        self.bits_per_entry = cache.bits_per_entry
        self.expected_entries = cache.expected_entries
        self._layout, self._seed, self._hash_scheme = like.layout, like.seed, like.hash_scheme
        self.filter = CountingBloomFilter.from_size(like.num_cells, like.num_hashes, counter_bits=4,
                                                    layout=like.layout, seed=like.seed,
                                                    hash_scheme=like.hash_scheme)
        #: key -> the time (time.time() scale) its document stops being fresh
        self.expires_at: dict = {}
        #: keys added plus keys withdrawn since the set was made
        self.changes = 0
        #: keys advertised that were not advertised before (what the summary's update threshold counts)
        self.new_documents = 0
        self._withdraw_at: dict = {}
        self._heap: list = []   # (withdraw at, key), lazily invalidated by _withdraw_at

    def __len__(self) -> int:
        return len(self.expires_at)

    def __contains__(self, key) -> bool:
        return key in self.expires_at

    def keys(self):
        return self.expires_at.keys()

    def advertise(self, key: str, *, expires_at: float, now: float, horizon: float) -> bool:
        """Advertise ``key`` (stored or refreshed now) if it stays fresh beyond ``now + horizon``; True if it is.
        A key that does not is withdrawn if it was advertised (its new copy expires sooner)."""
        withdraw_at = expires_at - horizon
        if withdraw_at <= now:
            self.withdraw(key)
            return False
        if key not in self.expires_at:
            self.filter.add(key)
            self.changes += 1
            self.new_documents += 1
        self.expires_at[key] = expires_at
        self._withdraw_at[key] = withdraw_at
        heapq.heappush(self._heap, (withdraw_at, key))
        if len(self._heap) > 2 * len(self._withdraw_at) + 1024:   # entries of keys re-advertised or withdrawn
            self._heap = [(at, k) for k, at in self._withdraw_at.items()]
            heapq.heapify(self._heap)
        return True

    def resize_filter(self, expected_entries: int) -> None:
        """Rebuild the filter for ``expected_entries`` keys (as ``DocumentCache.resize_filter`` does)."""
        if isinstance(expected_entries, bool) or not isinstance(expected_entries, int) or expected_entries < 1:
            raise ValueError(f"expected_entries must be an int >= 1, got {expected_entries!r}")
        num_counters = max(self.bits_per_entry * expected_entries, 2)
        num_hashes = theory.optimal_num_hashes(num_counters, expected_entries, layout=self._layout)
        fresh = CountingBloomFilter.from_size(num_counters, num_hashes, counter_bits=4, layout=self._layout,
                                              seed=self._seed, hash_scheme=self._hash_scheme)
        if self.expires_at:
            fresh.update(list(self.expires_at))
        self.filter = fresh
        self.expected_entries = expected_entries

    def withdraw(self, key: str) -> bool:
        """Stop advertising ``key``; True if it was advertised."""
        if self.expires_at.pop(key, None) is None:
            return False
        del self._withdraw_at[key]
        self.filter.remove(key)
        self.changes += 1
        return True

    def withdraw_expiring(self, now: float) -> list:
        """Withdraw every key whose freshness ends within the horizon of ``now``; returns them."""
        withdrawn, heap = [], self._heap
        while heap and heap[0][0] <= now:
            at, key = heapq.heappop(heap)
            if self._withdraw_at.get(key) == at:
                self.withdraw(key)
                withdrawn.append(key)
        return withdrawn
