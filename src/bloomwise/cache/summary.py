"""Cache summaries on the wire: what a proxy sends its peers (SummaryPublisher), what a peer keeps (PeerSummary).

Summary Cache (Fan, Cao, Almeida and Broder, *Summary Cache: A Scalable Wide-Area Web Cache Sharing Protocol*,
sections V and VI): a proxy does not tell its peers about every change of its cache. It waits until the fraction of
its cached documents that are new (documents stored since the last publication that were not cached before, over the
documents cached now; evictions are not counted, as in the paper) reaches an update threshold (the paper studies 1%
to 10%), then sends either the positions of its summary that changed since
the last publication (a *delta*) or the whole summary, whichever is smaller. Two kinds of summary:

- ``"bits"``: the bit view of the proxy's counting filter (counter > 0), a plain Bloom filter (Summary Cache, Squid's
  Cache Digests). A delta lists the positions whose bit flipped.
- ``"counters"``: the 4-bit counters themselves, which the Bloom-paradox routing needs (Rottenstreich and Keslassy,
  *The Bloom Paradox: When Not to Use a Bloom Filter*, section VII, Theorem 2). A delta lists the positions whose
  counter changed, with the new values.

The wire form of a :class:`SummaryUpdate` is a bloomwise file (``bloomwise._format``; docs/format.md), structure id 5
``SUMMARY_UPDATE``, without metadata: the 64-byte header carries the filter's geometry (layout, hash scheme, seed,
``num_cells`` = m positions, ``num_hashes`` = k, ``num_keys`` = the keys in the summary) and both checksums (CRC32 of
the header, XXH64 of the payload). The payload starts with a 40-byte little-endian record (fixed-size, so that a
small delta does not pay for a JSON object padded to 64 bytes)::

    offset size field
    0      1    kind: 1 bits, 2 counters
    1      1    counter bits: 0 (bits kind) or 4
    2      1    encoding: 0 whole, 1 delta
    3      5    reserved, zero
    8      8    origin: the publisher's random 64-bit instance id (a restart changes it)
    16     8    version: 1 for the first publication, +1 for each one after it
    24     8    base version: the version a delta applies to (0 for a whole summary)
    32     8    number of changes: positions in a delta (0 for a whole summary)
    40     ...  the content

and the content:

- whole, bits: the m bits as little-endian 64-bit words (bit p = bit p % 64 of word p // 64), exactly a BloomFilter's
  payload; whole, counters: the m 4-bit counters, two per byte, low nibble first, padded to whole 64-bit words,
  exactly a CountingBloomFilter's payload.
- delta: the changed positions in increasing order as LEB128 varints of the gaps (``p_0``, then
  ``p_i - p_{i-1} - 1``), so a delta of d positions among m costs about ``d * log2(m / d) / 7`` bytes rather than
  Summary Cache's 4 bytes per position; counters kind: then the d new counter values, two per byte, low nibble
  first (a zero high nibble pads an odd count).

:meth:`SummaryUpdate.from_bytes` trusts nothing: it checks the size against ``max_size`` before reading, then the
checksums, every field, and that the receiver's copy of the summary would fit ``max_size`` too (so a small delta
cannot make a receiver allocate a huge filter), and raises :class:`~bloomwise.errors.FormatError` on any problem.
"""
from __future__ import annotations

import math
import secrets
import struct
import time
from collections import OrderedDict
from typing import Optional

import numpy as np

from bloomwise import _format
from bloomwise._checks import check_fraction, check_tolerance
from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter, net_changes
from bloomwise.errors import FormatError

__all__ = ["SummaryUpdate", "SummaryPublisher", "PeerSummary", "SummaryGap", "SUMMARY_KINDS",
           "DEFAULT_MAX_SUMMARY_BYTES"]

SUMMARY_KINDS = ("bits", "counters")
#: what ``from_bytes`` and ``PeerSummary`` accept by default: an update, and a receiver's copy of a summary
DEFAULT_MAX_SUMMARY_BYTES = 64 << 20
_LAYOUTS = {"classic": _format.Layout.CLASSIC, "partitioned": _format.Layout.PARTITIONED}
_LAYOUT_NAMES = {v: k for k, v in _LAYOUTS.items()}
_MAX_VARINT_BYTES = 7  # positions < 2**48 (the format's MAX_NUM_BITS) need at most 7 bytes of 7 bits
_PREFIX = struct.Struct("<BBB5sQQQQ")  # kind, counter bits, encoding, reserved, origin, version, base, changes
_KIND_IDS = {"bits": 1, "counters": 2}
_KIND_NAMES = {v: k for k, v in _KIND_IDS.items()}


class SummaryGap(Exception):
    """A delta cannot be applied: it is based on another version than the one held, or comes from another
    instance of the peer (its origin id changed: it restarted). The receiver should fetch the whole summary."""


# ---- varints ---------------------------------------------------------------------------------------------------------
def _encode_positions(positions: np.ndarray) -> bytes:
    """Sorted unique positions -> LEB128 varints of their gaps (vectorised)."""
    if positions.size == 0:
        return b""
    if positions.size < 256:  # a small delta: a plain loop beats a dozen numpy calls
        out = bytearray()
        previous = -1
        for position in positions.tolist():
            gap = position - previous - 1
            previous = position
            while gap >= 0x80:
                out.append((gap & 0x7F) | 0x80)
                gap >>= 7
            out.append(gap)
        return bytes(out)
    gaps = np.diff(positions, prepend=np.uint64(0)).astype(np.uint64)
    gaps[1:] -= np.uint64(1)
    lengths = np.ones(gaps.size, dtype=np.int64)
    rest = gaps >> np.uint64(7)
    while rest.any():
        lengths += rest > 0
        rest >>= np.uint64(7)
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for j in range(int(lengths.max())):
        sel = lengths > j
        byte = (gaps[sel] >> np.uint64(7 * j)) & np.uint64(0x7F)
        more = (lengths[sel] > j + 1).astype(np.uint64) << np.uint64(7)
        out[starts[sel] + j] = (byte | more).astype(np.uint8)
    return out.tobytes()


def _decode_positions(data: np.ndarray, count: int, num_cells: int) -> np.ndarray:
    """The inverse of :func:`_encode_positions`; FormatError unless exactly ``count`` increasing positions < m."""
    ends = np.flatnonzero(data < 0x80)
    if ends.size != count or (count and ends[-1] != data.size - 1) or (not count and data.size):
        raise FormatError(f"a delta's positions do not decode: expected {count} varints in {data.size} bytes, "
                          f"found {ends.size} complete ones")
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > _MAX_VARINT_BYTES:
        raise FormatError(f"a delta's position gap takes {int(lengths.max())} bytes; at most "
                          f"{_MAX_VARINT_BYTES} are possible")
    gaps = np.zeros(count, dtype=np.uint64)
    for j in range(int(lengths.max())):
        sel = lengths > j
        gaps[sel] |= (data[starts[sel] + j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
    positions = np.cumsum(gaps + np.uint64(1), dtype=np.uint64) - np.uint64(1)
    # each step adds 1..2**49: a wrap-around of 2**64 would make a position smaller than the one before
    if (count > 1 and not bool(np.all(positions[1:] > positions[:-1]))) or int(positions[-1]) >= num_cells:
        raise FormatError(f"a delta names a position outside the summary's {num_cells} positions")
    return positions


def _net_flips(entries: np.ndarray) -> np.ndarray:
    """Journal entries (position << 1 | new bit, in order) -> the positions whose bit differs from its value before
    the first entry, sorted. A bit's first transition leaves the value it had; it ends changed iff its last
    transition sets the same value. (``counting.net_changes`` does this with numpy; most deltas are small.)"""
    if entries.size > 512:
        return net_changes(entries, 0, 0).positions
    first: dict = {}
    last: dict = {}
    for entry in entries.tolist():
        position = entry >> 1
        first.setdefault(position, entry & 1)
        last[position] = entry & 1
    return np.array(sorted(p for p, bit in last.items() if first[p] == bit), dtype=np.uint64)


def _pack_nibbles(values: np.ndarray) -> bytes:
    padded = np.zeros(values.size + (values.size & 1), dtype=np.uint8)
    padded[:values.size] = values
    return (padded[0::2] | (padded[1::2] << 4)).tobytes()


def _unpack_nibbles(data: np.ndarray, count: int) -> np.ndarray:
    out = np.empty(data.size * 2, dtype=np.uint8)
    out[0::2] = data & 0xF
    out[1::2] = data >> 4
    if out.size > count and out[count:].any():
        raise FormatError("the padding after a delta's last counter value is not zero")
    return out[:count]


def _bits_payload_size(num_cells: int) -> int:
    return (num_cells + 63) // 64 * 8


def _counters_payload_size(num_cells: int) -> int:
    return (num_cells * 4 + 63) // 64 * 8


def _state_size(kind: str, num_cells: int) -> int:
    return _bits_payload_size(num_cells) if kind == "bits" else _counters_payload_size(num_cells)


# ---- the update ------------------------------------------------------------------------------------------------------
class SummaryUpdate:
    """One summary publication: a whole summary (``base_version is None``) or a delta against ``base_version``.

    Attributes: ``kind`` ("bits" | "counters"), ``version``, ``base_version``, ``origin`` (int, 64 bits), the
    filter's parameters ``num_cells`` (m positions), ``num_hashes`` (k), ``layout``, ``seed``, ``hash_scheme``,
    ``num_keys`` (keys in the summary), and the content: ``payload`` (bytes, whole) or ``positions`` (numpy uint64,
    increasing) and, counters kind, ``values`` (numpy uint8, the new counters). ``to_bytes()`` is the exact wire
    form; ``nbytes`` its length (computed once).
    """

    __slots__ = ("kind", "version", "base_version", "origin", "num_cells", "num_hashes", "layout", "seed",
                 "hash_scheme", "num_keys", "payload", "positions", "values", "_wire", "_body")

    def __init__(self, *, kind, version, base_version, origin, num_cells, num_hashes, layout, seed, hash_scheme,
                 num_keys, payload=None, positions=None, values=None):
        if kind not in SUMMARY_KINDS:
            raise ValueError(f"kind must be 'bits' or 'counters', got {kind!r}")
        self.kind = kind
        self.version = version
        self.base_version = base_version
        self.origin = origin
        self.num_cells = num_cells
        self.num_hashes = num_hashes
        self.layout = layout
        self.seed = seed
        self.hash_scheme = hash_scheme
        self.num_keys = num_keys
        self.payload = payload
        self.positions = positions
        self.values = values
        self._wire = None
        self._body = None

    @property
    def is_delta(self) -> bool:
        return self.base_version is not None

    @property
    def num_changes(self) -> int:
        """Positions in a delta (0 for a whole summary)."""
        return 0 if self.positions is None else int(self.positions.size)

    @property
    def geometry(self) -> tuple:
        """What must match between a delta and the summary it applies to."""
        return (self.kind, self.num_cells, self.num_hashes, self.layout, self.seed, self.hash_scheme)

    def _payload_bytes(self) -> bytes:
        prefix = _PREFIX.pack(_KIND_IDS[self.kind], 4 if self.kind == "counters" else 0, int(self.is_delta),
                              bytes(5), self.origin, self.version, self.base_version or 0, self.num_changes)
        if not self.is_delta:
            return prefix + bytes(self.payload)
        data = prefix + _encode_positions(self.positions)
        if self.kind == "counters":
            data += _pack_nibbles(self.values)
        return data

    def to_bytes(self) -> bytes:
        """The exact bytes sent to a peer (a bloomwise file of structure SUMMARY_UPDATE)."""
        if self._wire is None:
            payload = self._body if self._body is not None else self._payload_bytes()
            header = _format.Header(
                structure=_format.Structure.SUMMARY_UPDATE, layout=_LAYOUTS[self.layout],
                hash_scheme=_format.hash_scheme_id(self.hash_scheme), seed=self.seed, num_cells=self.num_cells,
                num_hashes=self.num_hashes, num_keys=self.num_keys, payload_length=len(payload))
            self._wire = _format.dumps(header, payload)
        return self._wire

    @property
    def nbytes(self) -> int:
        """``len(self.to_bytes())``: the bytes this update costs on the wire (the 64-byte header and the payload;
        computed without building the header)."""
        if self._wire is not None:
            return len(self._wire)
        if self._body is None:
            self._body = self._payload_bytes()
        return _format.HEADER_SIZE + len(self._body)

    @classmethod
    def from_bytes(cls, data, *, max_size: int = DEFAULT_MAX_SUMMARY_BYTES) -> "SummaryUpdate":
        """Parse and check an update received from a peer; FormatError naming what is wrong.

        :param max_size: the largest update, and the largest summary a receiver is willing to hold, in bytes.
        """
        size = memoryview(data).nbytes
        if size > max_size:
            raise FormatError(f"a summary update of {size} bytes exceeds the limit of {max_size} bytes")
        header, payload = _format.loads(data, structure=_format.Structure.SUMMARY_UPDATE)
        if header.meta:
            raise FormatError("a summary update has no metadata, this one has some")
        if len(payload) < _PREFIX.size:
            raise FormatError(f"a summary update's payload starts with a {_PREFIX.size}-byte record, this one has "
                              f"{len(payload)} bytes")
        kind_id, counter_bits, encoding, reserved, origin, version, base, count = _PREFIX.unpack_from(payload)
        kind = _KIND_NAMES.get(kind_id)
        if kind is None:
            raise FormatError(f"summary kind must be 1 (bits) or 2 (counters), the update says {kind_id}")
        if counter_bits != (4 if kind == "counters" else 0):
            raise FormatError(f"a {kind} summary has counter bits {4 if kind == 'counters' else 0}, the update says "
                              f"{counter_bits}")
        if encoding not in (0, 1) or any(reserved):
            raise FormatError(f"encoding must be 0 (whole) or 1 (delta) and the reserved bytes zero, the update says "
                              f"encoding {encoding}, reserved {reserved.hex()}")
        if not 1 <= version < 2**63:
            raise FormatError(f"summary version must be >= 1, the update says {version}")
        if encoding == 0 and (base or count):
            raise FormatError(f"a whole summary has base version 0 and no changes, the update says {base}, {count}")
        if encoding == 1 and not 1 <= base <= version:
            raise FormatError(f"a delta's base version must be in [1, version={version}], the update says {base}")
        base = base if encoding == 1 else None
        payload = payload[_PREFIX.size:]
        if header.layout not in _LAYOUT_NAMES:
            raise FormatError(f"a summary has the classic or partitioned layout, the update says {header.layout.name}")
        scheme = _format.keyed_hash_scheme(header, "a summary")
        if header.flags:
            raise FormatError("a summary cannot need a key function (the KEYED flag is set)")
        m, k = header.num_cells, header.num_hashes
        if header.layout == _format.Layout.PARTITIONED and k > m:
            raise FormatError(f"a partitioned summary needs at least k={k} positions, the update says m={m}")
        if _state_size(kind, m) > max_size:
            raise FormatError(f"the summary has {m} positions: holding it takes {_state_size(kind, m)} bytes, over "
                              f"the limit of {max_size}")
        fields = dict(kind=kind, version=version, base_version=base, origin=origin, num_cells=m,
                      num_hashes=k, layout=_LAYOUT_NAMES[header.layout], seed=header.seed,
                      hash_scheme=_format.hash_scheme_name(scheme), num_keys=header.num_keys)
        raw = np.frombuffer(payload, dtype=np.uint8)
        if base is None:
            expected = _state_size(kind, m)
            if raw.size != expected:
                raise FormatError(f"a whole {kind} summary of {m} positions has {expected} bytes of payload, the "
                                  f"update has {raw.size}")
            used = m if kind == "bits" else 4 * m
            if used % 8 and raw[used // 8] >> (used % 8) or raw[(used + 7) // 8:].any():
                raise FormatError("the padding after the summary's last position is not zero")
            update = cls(payload=bytes(raw), **fields)
        else:
            if not 0 <= count <= min(m, raw.size):
                raise FormatError(f"the number of changes must be in [0, {min(m, raw.size)}], the update says {count}")
            values = None
            if kind == "counters":
                nibble_bytes = (count + 1) // 2
                if nibble_bytes > raw.size:
                    raise FormatError(f"a counters delta of {count} changes needs {nibble_bytes} bytes of values, the "
                                      f"payload has {raw.size} bytes")
                values = _unpack_nibbles(raw[raw.size - nibble_bytes:], count)
                raw = raw[:raw.size - nibble_bytes]
            positions = _decode_positions(raw, count, m)
            update = cls(positions=positions, values=values, **fields)
        update._wire = bytes(data)
        return update

    def __repr__(self) -> str:
        what = f"delta {self.base_version}->{self.version}, {self.num_changes} changes" if self.is_delta \
            else f"whole v{self.version}"
        return (f"<SummaryUpdate {self.kind} {what}: m={self.num_cells} k={self.num_hashes} keys={self.num_keys} "
                f"origin={self.origin:016x}>")


# ---- the sender ------------------------------------------------------------------------------------------------------
class SummaryPublisher:
    """Decides when a cache's summary is due and builds the updates its peers receive.

    :param cache: the :class:`~bloomwise.cache.store.DocumentCache` summarised (its ``filter``).
    :param kind: ``"bits"`` (default) or ``"counters"``.
    :param update_threshold: publish when (new documents stored since the last publication) / max(1, documents
        cached) reaches this fraction, in (0, 1] (Summary Cache's threshold: 1% to 10%).
    :param history: how many published versions are kept to serve deltas (``delta_since``), >= 1.
    :param origin: the 64-bit instance id sent with every update (default: random).
    :param resize_tolerance: None (default): the summary keeps the cache's filter as sized. A fraction d > 0: before
        each publication, when the documents cached n differ from the count the filter was sized for n0 by more
        than ``d * n0``, the cache's filter is rebuilt for n (``DocumentCache.resize_filter``), so the summary
        carries ``bits_per_entry`` positions per document actually cached, within a factor ``1 + d``; that
        publication is whole (a new geometry). Squid rebuilds its Cache Digest the same way, with d = 10%
        (``storeDigestResize``: "small change, will not resize").

    Each published version's state (the bit view's words, or the packed counters) is kept for ``history``
    versions: a delta is the difference between two kept states, found in O(m / 64) word comparisons.
    ``mean_positions_per_document`` is the mean, over publications, of the summary's positions per cached document,
    weighted by the documents (``sum m / sum n``, so that the first publications of a nearly empty cache do not
    dominate): the bits per entry the peers actually received.
    """

    def __init__(self, cache, *, kind: str = "bits", update_threshold: float = 0.01, history: int = 4,
                 origin: Optional[int] = None, resize_tolerance: Optional[float] = None):
        if kind not in SUMMARY_KINDS:
            raise ValueError(f"summary kind must be 'bits' or 'counters', got {kind!r}")
        check_fraction("update_threshold", update_threshold)
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        self.resize_tolerance = check_tolerance("resize_tolerance", resize_tolerance)
        self.cache = cache
        self.kind = kind
        self.update_threshold = float(update_threshold)
        self.history = history
        self.origin = secrets.randbits(64) if origin is None else int(origin) & (2**64 - 1)
        self._geometry = self._geometry_of(cache.filter)
        self._states: OrderedDict = OrderedDict()  # version -> (state array, num_keys, geometry)
        self._mark = None  # bits kind: the filter's change-journal mark of the last published version
        self._version = 0
        self._changes_at_publication = cache.changes
        self._new_at_publication = cache.new_documents
        #: sums over publications of the summary's positions m and of the documents cached n
        self.published_positions = 0
        self.published_documents = 0
        #: publications that re-sized the cache's filter first
        self.resizes = 0

    def _geometry_of(self, filt) -> dict:
        return dict(kind=self.kind, num_cells=filt.num_cells, num_hashes=filt.num_hashes, layout=filt.layout,
                    seed=filt.seed, hash_scheme=filt.hash_scheme)

    @property
    def mean_positions_per_document(self) -> Optional[float]:
        """``published_positions / published_documents``: summary positions per cached document over the
        publications; None before a publication with documents."""
        if not self.published_documents:
            return None
        return self.published_positions / self.published_documents

    @property
    def current_version(self) -> int:
        """The last version published (0 before the first publication)."""
        return self._version

    @property
    def current_num_keys(self) -> int:
        """The keys of the cache's filter when the last version was published (0 before the first publication)."""
        return self._states[self._version][1] if self._version in self._states else 0

    @property
    def pending_changes(self) -> int:
        """Documents added, removed or evicted since the last publication."""
        return self.cache.changes - self._changes_at_publication

    @property
    def pending_new_documents(self) -> int:
        """New documents stored since the last publication (what the update threshold counts)."""
        return self.cache.new_documents - self._new_at_publication

    def due(self) -> bool:
        """Whether the new documents since the last publication reached ``update_threshold`` times the documents
        cached (before the first publication: as soon as the cache changed)."""
        if self._version == 0:
            return self.cache.changes != self._changes_at_publication
        return self.cache.new_documents - self._new_at_publication >= self.update_threshold * max(1, len(self.cache))

    def _resize_if_drifted(self) -> bool:
        """Rebuild the cache's filter for the documents cached now when their number drifted past the tolerance."""
        cache = self.cache
        count = len(cache)
        if self.resize_tolerance is None or count == 0 \
                or abs(count - cache.expected_entries) <= self.resize_tolerance * cache.expected_entries:
            return False
        cache.resize_filter(count)
        self._geometry = self._geometry_of(cache.filter)
        self._mark = None  # the new filter's journal starts now
        self.resizes += 1
        return True

    def _state(self) -> np.ndarray:
        """The summary now. Bits: the last published words with the flips the filter's change journal recorded since
        (O(changes), not O(m)); counters: a copy of the packed counters."""
        filt = self.cache.filter
        if self.kind == "counters":
            return np.frombuffer(filt.payload_view(), dtype=np.uint8).copy()
        if self._mark is None or not self._states:
            self._mark = filt.mark()
            return filt.bit_view().copy()
        entries, end = filt.journal_entries_since(self._mark)
        filt.trim_journal(end)
        self._mark = end
        words = next(reversed(self._states.values()))[0].copy()
        positions = _net_flips(entries)
        if positions.size:
            index = (positions >> np.uint64(6)).astype(np.intp)
            np.bitwise_xor.at(words, index, np.uint64(1) << (positions & np.uint64(63)))
        return words

    def _whole(self, version: int) -> SummaryUpdate:
        state, num_keys, geometry = self._states[version]
        return SummaryUpdate(version=version, base_version=None, origin=self.origin, num_keys=num_keys,
                             payload=state.tobytes(), **geometry)

    def _delta(self, base: int, version: int) -> SummaryUpdate:
        old, _, _ = self._states[base]
        new, num_keys, geometry = self._states[version]
        values = None
        if self.kind == "bits":
            diff = old ^ new
            words = np.flatnonzero(diff)
            bits = np.unpackbits(diff[words].view(np.uint8), bitorder="little").reshape(-1, 64)
            rows, cols = np.nonzero(bits)
            positions = words[rows].astype(np.uint64) * np.uint64(64) + cols.astype(np.uint64)
        else:
            changed = np.flatnonzero(old != new)
            lo = changed[(old[changed] ^ new[changed]) & 0x0F != 0]
            hi = changed[(old[changed] ^ new[changed]) & 0xF0 != 0]
            positions = np.sort(np.concatenate([lo.astype(np.uint64) * np.uint64(2),
                                                hi.astype(np.uint64) * np.uint64(2) + np.uint64(1)]))
            byte = new[(positions >> np.uint64(1)).astype(np.intp)]
            values = np.where(positions & np.uint64(1), byte >> 4, byte & 0x0F).astype(np.uint8)
        return SummaryUpdate(version=version, base_version=base, origin=self.origin, num_keys=num_keys,
                             positions=positions, values=values, **geometry)

    def _smaller(self, base: int, version: int) -> SummaryUpdate:
        geometry = self._states[version][2]
        if self._states[base][2] != geometry:  # the filter was re-sized in between: no delta exists
            return self._whole(version)
        delta = self._delta(base, version)
        whole_size = _format.HEADER_SIZE + _PREFIX.size + _state_size(self.kind, geometry["num_cells"])
        return delta if delta.nbytes <= whole_size else self._whole(version)

    def publish(self, *, whole: bool = False) -> SummaryUpdate:
        """Publish the cache's current summary as the next version: a delta against the previous version or the
        whole summary, whichever is smaller on the wire (``whole=True``: always whole; so is the first publication
        after the filter was re-sized). Resets the counts of changes and of new documents."""
        cache = self.cache
        resized = self._resize_if_drifted()
        version = self._version + 1
        self._states[version] = (self._state(), cache.filter.num_keys, self._geometry)
        while len(self._states) > self.history:
            self._states.popitem(last=False)
        self._version = version
        self._changes_at_publication = cache.changes
        self._new_at_publication = cache.new_documents
        self.published_positions += self._geometry["num_cells"]
        self.published_documents += len(cache)
        if whole or resized or version - 1 not in self._states:
            return self._whole(version)
        return self._smaller(version - 1, version)

    def whole_summary(self) -> SummaryUpdate:
        """The last published version as a whole summary (publishes version 1 first if nothing was published)."""
        if self._version == 0:
            return self.publish(whole=True)
        return self._whole(self._version)

    def delta_since(self, version: int) -> Optional[SummaryUpdate]:
        """What brings a peer holding ``version`` to the current version: a delta, or the whole summary when that is
        smaller; an empty delta when it is current; None when ``version`` is no longer kept (send the whole)."""
        if version not in self._states or self._version == 0:
            return None
        return self._smaller(version, self._version)


# ---- the receiver ----------------------------------------------------------------------------------------------------
class PeerSummary:
    """A receiver's copy of one peer's summary, kept up to date with :meth:`apply`.

    Membership (``may_contain``) is the compiled filter's test; the Bloom-paradox posterior (:meth:`posterior`) costs
    k table look-ups: for a counters summary, Theorem 2 of *The Bloom Paradox* gives
    ``Pr(x in S | c_1..c_k) = m^k prod(c_i) P / (m^k prod(c_i) P + (n k)^k (1 - P))``, i.e. the log-odds
    ``logit(P) + sum_i log(c_i m / (n k))``: the table ``log(c m / (n k))`` for c = 0..15 is built once per
    received update (``bloomwise.paradox.posterior.counter_log_ratios``). For a bits summary the evidence is one
    positive answer: ``P / (P + (1 - P) FPR)`` with the summary's FPR estimated from its fill, ``(set / m)^k``.
    """

    def __init__(self, *, max_size: int = DEFAULT_MAX_SUMMARY_BYTES):
        self.max_size = max_size
        self.filter = None
        self.kind: Optional[str] = None
        self.version: Optional[int] = None
        self.origin: Optional[int] = None
        self.num_keys = 0
        self.received_at: Optional[float] = None
        self._geometry: Optional[tuple] = None
        self._log_ratios: list = []
        self._fpr = 1.0
        self._set_bits = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the summary held (0 before the first update)."""
        return 0 if self.filter is None else self.filter.nbytes

    @property
    def fpr(self) -> float:
        """The summary's false-positive rate estimated from its fill (bits kind: ``(set bits / m)^k``; counters:
        the same with nonzero counters)."""
        return self._fpr

    def apply(self, update, *, now: Optional[float] = None) -> None:
        """Apply a whole summary or a delta (bytes are parsed with ``SummaryUpdate.from_bytes`` first).

        Raises SummaryGap, changing nothing, when a delta is based on another version than the one held, comes from
        another origin, or describes a filter of other parameters; FormatError for bad bytes.
        """
        if not isinstance(update, SummaryUpdate):
            update = SummaryUpdate.from_bytes(update, max_size=self.max_size)
        if update.is_delta:
            if self.version is None:
                raise SummaryGap(f"a delta against version {update.base_version}, but no summary is held yet")
            if update.origin != self.origin:
                raise SummaryGap(f"the peer's origin id changed ({self.origin:016x} -> {update.origin:016x}): it "
                                 "restarted; fetch its whole summary")
            if update.base_version != self.version:
                raise SummaryGap(f"a delta against version {update.base_version}, but version {self.version} is held")
            if update.geometry != self._geometry:
                raise SummaryGap("a delta for a summary of other parameters than the one held")
            self._apply_delta(update)
        else:
            if _state_size(update.kind, update.num_cells) > self.max_size:
                raise FormatError(f"a summary of {update.num_cells} positions exceeds the limit of {self.max_size} "
                                  f"bytes")
            self._apply_whole(update)
        self.kind = update.kind
        self.version = update.version
        self.origin = update.origin
        self.num_keys = update.num_keys
        self.received_at = time.time() if now is None else now
        self._derive()

    def _new_filter(self, update: SummaryUpdate):
        if update.kind == "bits":
            return BloomFilter.from_size(update.num_cells, update.num_hashes, layout=update.layout, seed=update.seed,
                                         hash_scheme=update.hash_scheme)
        return CountingBloomFilter.from_size(update.num_cells, update.num_hashes, counter_bits=4,
                                             layout=update.layout, seed=update.seed, hash_scheme=update.hash_scheme)

    def _apply_whole(self, update: SummaryUpdate) -> None:
        if update.geometry != self._geometry:
            filt = self._new_filter(update)
        else:
            filt = self.filter
        try:
            if update.kind == "bits":
                filt.replace_payload(update.payload)
                self._set_bits = int(np.unpackbits(np.frombuffer(update.payload, dtype=np.uint8)).sum())
            else:
                filt.replace_payload(update.payload)
                cells = np.frombuffer(update.payload, dtype=np.uint8)
                self._set_bits = int(np.count_nonzero(cells & 0x0F) + np.count_nonzero(cells >> 4))
        except ValueError as exc:
            raise FormatError(f"the summary's payload does not fit its filter: {exc}") from None
        self.filter = filt
        self._geometry = update.geometry

    def _apply_delta(self, update: SummaryUpdate) -> None:
        positions = update.positions
        if positions.size == 0:
            return
        if update.kind == "bits":
            words = np.frombuffer(self.filter.payload_view(), dtype=np.uint64)
            current = (words[(positions >> np.uint64(6)).astype(np.intp)] >> (positions & np.uint64(63))) \
                & np.uint64(1)
            new = (current ^ np.uint64(1)).astype(np.uint8)
            self.filter.assign_bits(np.ascontiguousarray(positions), new)
            self._set_bits += int(new.sum()) * 2 - int(new.size)
        else:
            cells = np.frombuffer(self.filter.payload_view(), dtype=np.uint8).copy()
            index = (positions >> np.uint64(1)).astype(np.intp)
            odd = (positions & np.uint64(1)).astype(bool)
            old_values = np.where(odd, cells[index] >> 4, cells[index] & 0x0F)
            values = update.values
            even = ~odd
            cells[index[even]] = (cells[index[even]] & 0xF0) | values[even]
            cells[index[odd]] = (cells[index[odd]] & 0x0F) | (values[odd] << 4)
            self.filter.replace_payload(cells)
            self._set_bits += int(np.count_nonzero(values)) - int(np.count_nonzero(old_values))

    def _derive(self) -> None:
        m, k = self._geometry[1], self._geometry[2]
        self._fpr = (self._set_bits / m) ** k
        if self.kind == "counters":
            n = max(1, self.num_keys)
            base = math.log(m / (n * k))
            self._log_ratios = [-math.inf] + [math.log(c) + base for c in range(1, 16)]

    # -- questions ---------------------------------------------------------------------------------------------------
    def may_contain(self, key) -> bool:
        """False when the peer certainly did not hold ``key`` at the summary's version; True when it may."""
        return self.filter is not None and key in self.filter

    def __contains__(self, key) -> bool:
        return self.may_contain(key)

    def counters(self, key) -> tuple:
        """The key's k counters in the summary (counters kind only)."""
        if self.kind != "counters":
            raise TypeError(f"counters() needs a counters summary, this one is {self.kind!r}")
        return self.filter.counters(key)

    def posterior(self, key, prior: float) -> float:
        """``Pr(key in the peer's cache | its summary)`` for the a-priori probability ``prior`` in [0, 1]."""
        if self.filter is None or prior <= 0.0:
            return 0.0
        if self.kind == "counters":
            table = self._log_ratios
            z = 0.0
            for c in self.filter.counters(key):
                if c == 0:
                    return 0.0
                z += table[c]
            if prior >= 1.0:
                return 1.0
            z += math.log(prior) - math.log1p(-prior)
            return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        if key not in self.filter:
            return 0.0
        return prior / (prior + (1.0 - prior) * self._fpr)

    def __repr__(self) -> str:
        if self.filter is None:
            return "<PeerSummary: empty>"
        return (f"<PeerSummary {self.kind} v{self.version}: m={self._geometry[1]} keys={self.num_keys} "
                f"fpr~{self._fpr:.3g} origin={self.origin:016x}>")
