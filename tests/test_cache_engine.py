"""The cache engine: DocumentCache, summaries on the wire, PeerSummary, routing policies, CacheNode."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise import CountingBloomFilter
from bloomwise.cache import (CacheNode, DocumentCache, FIFOPolicy, OnlinePrior, ParadoxPolicy, PeerState, PeerSummary,
                             STATS_KEYS, SummaryGap, SummaryPublisher, SummaryUpdate, make_policy)
from bloomwise.errors import FormatError
from bloomwise.paradox.posterior import cbf_posterior
from bloomwise.paradox.priors import SampledPrior
from bloomwise.paradox.proxies import optimal_query_order


def url(i):
    return f"GET http://example.org/doc/{i}"


def rebuilt_filter(cache):
    """A counting filter of the same geometry holding exactly the cache's keys."""
    f = cache.filter
    fresh = CountingBloomFilter.from_size(f.num_cells, f.num_hashes, counter_bits=4, layout=f.layout, seed=f.seed)
    fresh.update(list(cache.keys()))
    return fresh


# ---- DocumentCache ---------------------------------------------------------------------------------------------------
def test_lru_eviction_exact():
    cache = DocumentCache(1000, expected_entries=10)
    assert cache.put("a", 400) == [] and cache.put("b", 400) == []
    assert cache.get("a").size == 400  # "a" is now the most recent
    assert cache.put("c", 300) == ["b"]
    assert cache.used_bytes == 700 and cache.num_documents == 2
    assert "b" not in cache and "b" not in cache.filter
    assert cache.put("d", 1001) == []  # larger than the cache: not stored
    assert "d" not in cache and "d" not in cache.filter
    assert cache.put("a", 2000) == ["a"]  # a replacement too large removes the old copy
    assert cache.keys() == {"c"}


def test_fifo_ignores_hits_and_peek_keeps_order():
    cache = DocumentCache(1000, eviction="fifo", expected_entries=10)
    cache.put("a", 400)
    cache.put("b", 400)
    cache.get("a")
    assert cache.put("c", 300) == ["a"]
    lru = DocumentCache(1000, expected_entries=10)
    lru.put("a", 400)
    lru.put("b", 400)
    assert lru.peek("a").size == 400  # no recency change
    assert lru.put("c", 300) == ["a"]


def test_replacement_growth_never_evicts_itself():
    cache = DocumentCache(1000, eviction=FIFOPolicy(), expected_entries=10)
    cache.put("a", 300)
    cache.put("b", 300)
    assert cache.put("a", 800) == ["b"]  # "a" is the FIFO victim, but it is the key being stored
    assert cache.keys() == {"a"} and cache.used_bytes == 800
    assert cache.filter.num_keys == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(capacity_bytes=0), "capacity_bytes must be at least 1"),
    (dict(capacity_bytes=-5), "capacity_bytes must be at least 1"),
    (dict(capacity_bytes=100, bits_per_entry=0), "bits_per_entry must be at least 1"),
    (dict(capacity_bytes=100, eviction="random"), "eviction must be one of"),
    (dict(capacity_bytes=100, expected_entries=0), "expected_entries must be at least 1"),
])
def test_cache_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DocumentCache(**kwargs)
    with pytest.raises(TypeError, match="capacity_bytes must be an int"):
        DocumentCache(1.5)
    with pytest.raises(ValueError, match="size must be an int >= 0"):
        DocumentCache(10).put("a", -1)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "get", "remove"]), st.integers(0, 30), st.integers(0, 400)),
                    max_size=120),
       eviction=st.sampled_from(["lru", "fifo"]))
def test_cache_invariants(ops, eviction):
    """Never over capacity; the counting filter equals one rebuilt from the cached keys; every key tests present."""
    cache = DocumentCache(1000, eviction=eviction, expected_entries=8, bits_per_entry=4)
    for op, i, size in ops:
        if op == "put":
            evicted = cache.put(url(i), size)
            assert all(k not in cache for k in evicted if k != url(i)) and url(i) in cache or size > 1000
        elif op == "get":
            cache.get(url(i))
        else:
            cache.remove(url(i))
        assert cache.used_bytes <= cache.capacity_bytes
        assert cache.used_bytes == sum(cache.peek(k).size for k in cache.keys())
    assert cache.filter == rebuilt_filter(cache)
    assert cache.filter.num_keys == cache.num_documents
    assert all(k in cache.filter for k in cache.keys())


# ---- summaries on the wire -------------------------------------------------------------------------------------------
def filled_cache(n, seed=0, **kwargs):
    cache = DocumentCache(64 * 8192, expected_entries=64, seed=seed, **kwargs)
    for i in range(n):
        cache.put(url(i), 100)
    return cache


def receiver_state(summary):
    return np.frombuffer(summary.filter._payload(), dtype=np.uint8)


def sender_state(cache, kind):
    if kind == "bits":
        return cache.filter._bit_view().view(np.uint8)
    return np.frombuffer(cache.filter._payload(), dtype=np.uint8)


@pytest.mark.parametrize("kind", ["bits", "counters"])
def test_wire_round_trip_whole_and_delta(kind):
    cache = filled_cache(40)
    pub = SummaryPublisher(cache, kind=kind, origin=0xABCDEF)
    first = pub.publish()
    assert not first.is_delta and first.version == 1 and first.base_version is None
    again = SummaryUpdate.from_bytes(first.to_bytes())
    assert again.to_bytes() == first.to_bytes() and again.payload == first.payload
    assert (again.kind, again.origin, again.num_keys, again.version) == (kind, 0xABCDEF, 40, 1)
    for i in range(40, 44):
        cache.put(url(i), 100)
    cache.remove(url(3))
    delta = pub.publish()
    assert delta.is_delta and delta.base_version == 1 and delta.version == 2
    assert delta.nbytes < first.nbytes
    parsed = SummaryUpdate.from_bytes(delta.to_bytes())
    assert np.array_equal(parsed.positions, delta.positions)
    if kind == "counters":
        assert np.array_equal(parsed.values, delta.values)
    peer = PeerSummary()
    peer.apply(first.to_bytes())
    peer.apply(delta.to_bytes())
    assert peer.version == 2 and peer.num_keys == 43
    assert np.array_equal(receiver_state(peer), sender_state(cache, kind))


def test_delta_encoding_exact_bytes():
    """The varint gaps of a known delta, byte for byte (pins the wire form of the positions)."""
    from bloomwise.cache.summary import _decode_positions, _encode_positions
    positions = np.array([0, 1, 130, 20000], dtype=np.uint64)
    data = _encode_positions(positions)
    # gaps 0, 0, 128, 19869 -> 00 | 00 | 80 01 | 9d 9b 01
    assert data == bytes([0x00, 0x00, 0x80, 0x01, 0x9D, 0x9B, 0x01])
    assert np.array_equal(_decode_positions(np.frombuffer(data, np.uint8), 4, 20001), positions)


@pytest.mark.parametrize("kind", ["bits", "counters"])
def test_whole_when_smaller(kind):
    cache = filled_cache(5)
    pub = SummaryPublisher(cache, kind=kind, origin=1)
    pub.publish()
    for i in range(5, 200):  # many changes: the delta would be larger than the whole summary
        cache.put(url(i), 100)
    update = pub.publish()
    assert not update.is_delta and update.version == 2
    forced = pub.publish(whole=True)
    assert not forced.is_delta and forced.version == 3


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.booleans(), st.integers(0, 80)), max_size=25), min_size=1,
                        max_size=8),
       kind=st.sampled_from(["bits", "counters"]), wire=st.booleans())
def test_receiver_follows_sender(batches, kind, wire):
    """After any sequence of changes and publications, the receiver's copy equals the sender's filter."""
    cache = DocumentCache(20 * 100, expected_entries=16, bits_per_entry=4)
    pub = SummaryPublisher(cache, kind=kind, origin=7)
    peer = PeerSummary()
    for batch in batches:
        for put, i in batch:
            cache.put(url(i), 100) if put else cache.remove(url(i))
        update = pub.publish()
        size = update.nbytes
        assert size == len(update.to_bytes())
        peer.apply(update.to_bytes() if wire else update)
        assert np.array_equal(receiver_state(peer), sender_state(cache, kind))
        assert all(peer.may_contain(k) for k in cache.keys())  # no false negative from a fresh summary
        assert peer.num_keys == cache.num_documents


def test_delta_since_and_history():
    cache = filled_cache(10)
    pub = SummaryPublisher(cache, kind="bits", origin=2, history=2)
    v1 = pub.publish()
    cache.put(url(11), 100)
    pub.publish()
    cache.put(url(12), 100)
    pub.publish()
    assert pub.delta_since(1) is None  # only versions 2 and 3 are kept
    catch_up = pub.delta_since(2)
    assert catch_up.base_version == 2 and catch_up.version == 3
    assert pub.delta_since(3).num_changes == 0
    peer = PeerSummary()
    peer.apply(v1)
    with pytest.raises(SummaryGap, match="version 1 is held"):
        peer.apply(catch_up)
    peer.apply(pub.whole_summary())
    assert peer.version == 3 and peer.may_contain(url(12))


def test_gap_on_restart_and_before_first_summary():
    cache = filled_cache(10)
    first = SummaryPublisher(cache, origin=1)
    restarted = SummaryPublisher(cache, origin=2)
    peer = PeerSummary()
    u = first.publish()
    restarted.publish()
    cache.put(url(50), 100)
    delta = restarted.publish()
    with pytest.raises(SummaryGap, match="no summary is held"):
        PeerSummary().apply(delta)
    peer.apply(u)
    with pytest.raises(SummaryGap, match="origin id changed"):
        peer.apply(delta)
    assert peer.version == 1 and peer.origin == 1  # unchanged


def valid_update_bytes(kind="counters", delta=True):
    cache = filled_cache(30)
    pub = SummaryPublisher(cache, kind=kind, origin=9)
    whole = pub.publish()
    cache.put(url(99), 100)
    return (pub.publish() if delta else whole).to_bytes()


@pytest.mark.parametrize("kind", ["bits", "counters"])
@pytest.mark.parametrize("delta", [False, True])
def test_corruption_is_format_error(kind, delta):
    data = valid_update_bytes(kind, delta)
    rng = np.random.default_rng(5)
    for _ in range(40):
        bad = bytearray(data)
        i = int(rng.integers(len(bad)))
        bad[i] ^= 1 << int(rng.integers(8))
        with pytest.raises(FormatError):
            SummaryUpdate.from_bytes(bytes(bad))
    for cut in (0, 10, 63, 64, len(data) - 1):
        with pytest.raises(FormatError):
            SummaryUpdate.from_bytes(data[:cut])
    with pytest.raises(FormatError, match="exceeds the limit"):
        SummaryUpdate.from_bytes(data, max_size=len(data) - 1)


PREFIX_FIELDS = ("kind", "counter_bits", "encoding", "reserved", "origin", "version", "base", "changes")


def forge(prefix=None, content=None, num_cells=None, meta=None, **header_changes):
    """A checksummed update with chosen fields (what a buggy or hostile peer could send)."""
    from bloomwise import _format
    from bloomwise.cache.summary import _PREFIX
    good = SummaryUpdate.from_bytes(valid_update_bytes("counters", True))
    header, body = _format.loads(good.to_bytes())
    fields = dict(zip(PREFIX_FIELDS, _PREFIX.unpack_from(body)))
    fields.update(prefix or {})
    body = _PREFIX.pack(*fields.values()) + (bytes(body[_PREFIX.size:]) if content is None else content)
    header_fields = dict(structure=header.structure, layout=header.layout, hash_scheme=header.hash_scheme,
                         seed=header.seed, num_cells=num_cells or header.num_cells, num_hashes=header.num_hashes,
                         num_keys=header.num_keys, payload_length=len(body), meta=meta or {})
    header_fields.update(header_changes)
    return _format.dumps(_format.Header(**header_fields), body)


def test_forge_unchanged_is_valid():
    assert SummaryUpdate.from_bytes(forge()).to_bytes() == valid_update_bytes("counters", True)


@pytest.mark.parametrize("forged, message", [
    (dict(prefix={"kind": 3}), "summary kind must be 1"),
    (dict(prefix={"counter_bits": 8}), "counter bits 4"),
    (dict(prefix={"encoding": 2}), "encoding must be 0"),
    (dict(prefix={"reserved": b"\x00\x00\x01\x00\x00"}), "reserved bytes zero"),
    (dict(prefix={"version": 0}), "version must be >= 1"),
    (dict(prefix={"base": 99}), "base version must be in"),
    (dict(prefix={"base": 0}), "base version must be in"),
    (dict(prefix={"encoding": 0}), "whole summary has base version 0"),
    (dict(prefix={"changes": 10**9}), "number of changes must be in"),
    (dict(prefix={"changes": 1}), "do not decode|values"),
    (dict(num_cells=2**40), "over the limit"),
    (dict(prefix={"changes": 1}, content=b"\x80" * 8 + b"\x01\x01"), "gap takes 9 bytes"),
    (dict(prefix={"changes": 2}, content=b"\xff\xff\x7f\x00\x11"), "outside the summary"),
    (dict(prefix={"changes": 2}, content=b"\x05\x00\x11\x10"), "do not decode"),
    (dict(prefix={"changes": 1}, content=b"\x05\x11"), "padding after a delta's last counter"),
    (dict(meta={"kind": "bits"}), "no metadata"),
    (dict(content=b"", prefix={"changes": 0}, payload_length=None), "starts with a 40-byte record|payload"),
])
def test_forged_updates_rejected(forged, message):
    if forged.get("payload_length", 1) is None:  # a payload shorter than the record
        from bloomwise import _format
        header, _ = _format.loads(forge())
        data = _format.dumps(_format.Header(structure=header.structure, layout=header.layout,
                                            hash_scheme=header.hash_scheme, seed=header.seed,
                                            num_cells=header.num_cells, num_hashes=header.num_hashes,
                                            payload_length=10), bytes(10))
    else:
        data = forge(**forged)
    with pytest.raises(FormatError, match=message):
        SummaryUpdate.from_bytes(data)


def test_forged_whole_payload_size_and_padding():
    from bloomwise.cache.summary import _PREFIX
    good = SummaryUpdate.from_bytes(valid_update_bytes("bits", False))
    assert good.num_cells % 64 == 0
    with pytest.raises(FormatError, match="has 64 bytes of payload, the update has 63"):
        SummaryUpdate.from_bytes(forge(prefix=dict(kind=1, counter_bits=0, encoding=0, base=0, changes=0),
                                       content=bytes(63), num_cells=512))
    with pytest.raises(FormatError, match="padding after the summary's last position"):
        SummaryUpdate.from_bytes(forge(prefix=dict(kind=1, counter_bits=0, encoding=0, base=0, changes=0),
                                       content=bytes(63) + b"\x80", num_cells=500))
    assert _PREFIX.size == 40


# ---- the posterior ---------------------------------------------------------------------------------------------------
def test_posterior_table_equals_cbf_posterior():
    cache = DocumentCache(300 * 100, expected_entries=300, bits_per_entry=4, seed=3)
    for i in range(300):
        cache.put(url(i), 100)
    pub = SummaryPublisher(cache, kind="counters", origin=1)
    peer = PeerSummary()
    peer.apply(pub.publish())
    checked = 0
    for i in range(0, 2000, 7):
        key = url(i)
        counters = peer.counters(key)
        for prior in (1e-4, 0.05, 0.5, 0.99):
            expected = cbf_posterior(list(counters), cache.filter.num_cells, 300, prior)
            got = peer.posterior(key, prior)
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-300)
            checked += expected > 0
    assert checked > 100


def test_bits_posterior_is_bayes_with_the_summary_fpr():
    cache = filled_cache(60)
    peer = PeerSummary()
    peer.apply(SummaryPublisher(cache, kind="bits", origin=1).publish())
    filled = int(np.unpackbits(cache.filter._bit_view().view(np.uint8)).sum())
    fpr = (filled / cache.filter.num_cells) ** cache.filter.num_hashes
    assert peer.fpr == pytest.approx(fpr, rel=1e-12)
    assert peer.posterior(url(1), 0.2) == pytest.approx(0.2 / (0.2 + 0.8 * fpr), rel=1e-12)
    absent = next(url(i) for i in range(1000, 5000) if not peer.may_contain(url(i)))
    assert peer.posterior(absent, 0.9) == 0.0
    with pytest.raises(TypeError, match="counters summary"):
        peer.counters(url(1))


# ---- routing ---------------------------------------------------------------------------------------------------------
def test_online_prior_equals_sampled_prior():
    rng = np.random.default_rng(1)
    outcomes = rng.random(300) < 0.3
    reference = SampledPrior(lambda key: key, rate=1.0, window=50)
    mine = OnlinePrior(window=50)
    for member in outcomes:
        reference.record(bool(member), bool(member))
        mine.record(True) if member else mine.record_absent()
    assert mine.estimate() == pytest.approx(reference.estimate(), rel=1e-12)
    assert OnlinePrior(initial=0.3).estimate() == 0.3


def summaries_for(groups, kind="counters", bits_per_entry=8):
    """One PeerSummary per group of document numbers."""
    out = []
    for j, docs in enumerate(groups):
        cache = DocumentCache(10**6, expected_entries=50, bits_per_entry=bits_per_entry, seed=j)
        for i in docs:
            cache.put(url(i), 10)
        s = PeerSummary()
        s.apply(SummaryPublisher(cache, kind=kind, origin=j).publish())
        out.append(s)
    return out


def test_policies_order():
    summaries = summaries_for([range(0, 40), range(20, 60), range(100, 140)])
    peers = [PeerState(j, s, 1.0 + j, True) for j, s in enumerate(summaries)]
    key = url(30)  # held by peers 0 and 1
    assert make_policy("none").order(key, peers) == []
    assert make_policy("icp").order(key, peers) == [0, 1, 2]
    assert make_policy("summary").order(key, peers)[:2] == [0, 1]
    peers[1].healthy = False
    assert make_policy("icp").order(key, peers) == [0, 2]
    peers[1].healthy = True
    paradox = make_policy("paradox", origin_cost=10.0)
    order = paradox.order(key, peers)
    # each peer's first sample: "maybe" (q = 1, so the mixture estimate is 1), smoothed to (1 * 1 + 1) / (1 + 2)
    probs = [s.posterior(key, 2 / 3) if s.may_contain(key) else 0.0 for s in summaries]
    assert len(order) == 2
    assert order == list(optimal_query_order(probs, [p.cost for p in peers], origin_cost=10.0).peers)
    with pytest.raises(ValueError, match="policy must be one of"):
        make_policy("multicast")
    with pytest.raises(ValueError, match="origin_cost must be a finite number > 0"):
        make_policy("paradox", origin_cost=0)


def test_paradox_outcome_prior_learns_and_stops_asking():
    summaries = summaries_for([range(0, 40)], kind="counters")
    peers = [PeerState("a", summaries[0], 1.0, True)]
    policy = ParadoxPolicy(origin_cost=10.0, prior_window=2000, prior_estimator="outcomes")
    assert policy.order(url(1), peers) == ["a"]  # initial prior 1: trust the summary
    for _ in range(20_000):  # the summary says "maybe" but every query misses (e.g. the peer serves nothing)
        policy.observe("a", url(1), False)
    prior = policy.prior("a")
    posterior = summaries[0].posterior(url(1), prior)
    assert 0 < prior < 3e-4 and 0.01 < posterior < 0.1  # a "maybe" worth a thought, but below 1 / omega
    assert policy.order(url(1), peers) == []  # p/tau <= 1/omega: straight to the origin
    strong = ParadoxPolicy(origin_cost=1.0 / (0.9 * posterior), prior_window=2000, prior_estimator="outcomes")
    for _ in range(20_000):
        strong.observe("a", url(1), False)
    assert strong.order(url(1), peers) == ["a"]  # the same posterior above 1 / omega: asked


def test_paradox_mixture_prior_estimates_membership():
    """q = P + (1 - P) FPR inverted: keys drawn uniformly from 400, of which the peer holds 40 (P = 0.1).
    Deterministic keys; the tolerance is about 6 standard deviations of the mean of 4000 samples. Two bits per entry:
    the summary's FPR is large, so the fraction of "maybe" answers (about 0.1 + 0.9 FPR) is far from the prior."""
    summaries = summaries_for([range(0, 40)], kind="bits", bits_per_entry=2)
    assert summaries[0].fpr > 0.2
    peers = [PeerState("a", summaries[0], 1.0, True)]
    policy = ParadoxPolicy(prior_window=1e9)
    assert policy.prior("a", summaries[0]) == 1.0  # no sample yet: initial_prior
    rng = np.random.default_rng(3)
    for i in rng.integers(0, 400, 4000):
        policy.order(url(int(i)), peers)
    assert policy.prior("a", summaries[0]) == pytest.approx(0.1, abs=0.03)
    with pytest.raises(ValueError, match="needs the peer's summary"):
        policy.prior("a")
    with pytest.raises(ValueError, match="prior_estimator must be one of"):
        ParadoxPolicy(prior_estimator="oracle")


# ---- CacheNode -------------------------------------------------------------------------------------------------------
def make_pair(policy="summary", kind="bits"):
    nodes = [CacheNode(name, DocumentCache(10_000, expected_entries=20), policy=policy, summary_kind=kind,
                       update_threshold=0.01, origin_id=i) for i, name in enumerate("ab")]
    nodes[0].add_peer("b")
    nodes[1].add_peer("a")
    return nodes


def test_node_request_flow_and_stats():
    a, b = make_pair()
    b.admit(url(1), 100)
    update = b.publish_summary()
    b.note_summary_sent("a", update.nbytes)
    a.receive_summary("b", update.to_bytes(), now=5.0)
    assert a.lookup(url(1)) is None
    assert a.route(url(1)) == ["b"]
    a.record_peer_answer("b", url(1), b.serve_peer_query(url(1)) is not None)
    a.admit(url(1), 100)
    assert a.lookup(url(1)).size == 100
    assert a.lookup(url(2)) is None and a.route(url(2)) == []
    a.record_origin_fetch(url(2))
    stats = a.stats(now=7.5)
    assert set(stats) == set(STATS_KEYS) | {"peers"}
    assert {k: stats[k] for k in ("requests", "local_hits", "remote_hits", "false_hits", "peer_queries",
                                  "origin_fetches", "summary_bytes_in")} == dict(
        requests=3, local_hits=1, remote_hits=1, false_hits=0, peer_queries=1, origin_fetches=1,
        summary_bytes_in=update.nbytes)
    assert stats["peers"]["b"] == {"summary_version": 1, "summary_age_seconds": 2.5,
                                   "summary_bytes": a.peer("b").summary.nbytes, "cost": 1.0, "healthy": True}
    assert b.stats()["summary_bytes_out"] == update.nbytes and b.stats()["peer_queries_served"] == 1


def test_node_bad_summary_keeps_previous():
    a, b = make_pair()
    b.admit(url(1), 100)
    good = b.publish_summary()
    a.receive_summary("b", good)
    bad = bytearray(good.to_bytes())
    bad[-1] ^= 0xFF
    with pytest.raises(FormatError):
        a.receive_summary("b", bytes(bad))
    assert a.peer("b").summary.version == 1 and a.peer("b").summary.may_contain(url(1))
    assert a.stats()["summaries_in"] == 1


def test_node_bad_configuration():
    cache = DocumentCache(1000)
    with pytest.raises(ValueError, match="update_threshold must be a fraction in \\(0, 1\\]"):
        CacheNode("a", cache, update_threshold=0)
    with pytest.raises(ValueError, match="update_threshold"):
        CacheNode("a", cache, update_threshold=1.5)
    with pytest.raises(ValueError, match="summary kind"):
        CacheNode("a", cache, summary_kind="digest")
    with pytest.raises(ValueError, match="peer_cost must be a finite number > 0"):
        CacheNode("a", cache, peer_cost=-1)
    node = CacheNode("a", cache)
    with pytest.raises(ValueError, match="own peer"):
        node.add_peer("a")
    node.add_peer("b")
    with pytest.raises(ValueError, match="already known"):
        node.add_peer("b")
    with pytest.raises(ValueError, match="tau must be"):
        node.set_peer_cost("b", 0)
    assert math.isclose(node.peers[0].cost, 1.0)


# ---- boundaries and counts that mutants once got past (issue 30) -----------------------------------------------------
def test_exactly_full_evicts_nothing():
    cache = DocumentCache(1000, expected_entries=10)
    assert cache.put(url(1), 400) == [] and cache.put(url(2), 600) == []  # 1000 of 1000 bytes: full, not over
    assert cache.used_bytes == 1000 and len(cache) == 2 and cache.changes == 2
    assert cache.put(url(3), 1) == [url(1)]  # one byte over: the least recently used goes


def test_document_of_exactly_the_capacity_is_stored():
    cache = DocumentCache(1000, expected_entries=10)
    cache.put(url(1), 10)
    assert cache.put(url(2), 1000) == [url(1)]  # it fits alone: everything else makes room
    assert url(2) in cache and url(2) in cache.filter and cache.used_bytes == 1000
    assert cache.put(url(3), 1001) == [] and url(3) not in cache and url(2) in cache  # larger: refused
    assert cache.put(url(2), 1001) == [url(2)] and len(cache) == 0  # an older copy of a refused key leaves


def test_changes_count_additions_and_evictions():
    cache = DocumentCache(1000, expected_entries=10)
    for i in range(5):
        cache.put(url(i), 300)  # three fit; the fourth and the fifth each evict one
    assert (cache.changes, cache.new_documents) == (5 + 2, 5)
    cache.put(url(4), 200)  # a new copy of a cached key: neither a change of the key set nor a new document
    assert (cache.changes, cache.new_documents) == (7, 5)
    cache.remove(url(4))
    assert (cache.changes, cache.new_documents, len(cache)) == (8, 5, 2)


def test_update_threshold_counts_new_documents_only():
    """Summary Cache's threshold: the fraction of *new* documents since the last publication. A full cache evicts
    one document per new one: counting both would publish at half the threshold."""
    cache = DocumentCache(100 * 100, expected_entries=100)
    pub = SummaryPublisher(cache, update_threshold=0.1, origin=1)
    assert not pub.due()
    for i in range(100):
        cache.put(url(i), 100)
    assert pub.due()  # the first publication: as soon as the cache changed
    pub.publish()
    for i in range(100, 109):
        cache.put(url(i), 100)  # 9 new documents, 9 evictions
    assert (pub.pending_new_documents, pub.pending_changes, pub.due()) == (9, 18, False)
    cache.put(url(109), 100)
    assert pub.pending_new_documents == 10 and pub.due()  # 10 new of 100 cached = 10%
    pub.publish()
    assert (pub.pending_new_documents, pub.due()) == (0, False)


def test_summary_resized_from_the_measured_load():
    """With ``resize_tolerance``, a publication first re-sizes the cache's filter to ``bits_per_entry`` positions per
    document cached when the count drifted more than the tolerance from the count it was sized for (Squid's
    storeDigestResize rule, 10%); the publication is then whole (a new geometry), and deltas follow again."""
    cache = DocumentCache(1 << 20, bits_per_entry=8, expected_entries=1000)
    pub = SummaryPublisher(cache, kind="bits", update_threshold=0.01, origin=1, resize_tolerance=0.1)
    for i in range(100):
        cache.put(url(i), 100)
    first = pub.publish()
    assert (cache.expected_entries, first.num_cells, first.is_delta) == (100, 800, False)
    assert all(url(i) in cache.filter for i in range(100))
    peer = PeerSummary()
    peer.apply(first)
    for i in range(100, 110):
        cache.put(url(i), 100)  # 110 documents: 10% more, within the tolerance
    second = pub.publish()
    assert second.is_delta and second.num_cells == 800
    peer.apply(second)
    cache.put(url(110), 100)  # 111: more than 10% over 100
    third = pub.publish()
    assert (third.is_delta, third.num_cells, cache.expected_entries) == (False, 888, 111)
    peer.apply(third)
    assert peer.filter.num_cells == 888 and all(peer.may_contain(url(i)) for i in range(111))
    assert pub.delta_since(2).num_cells == 888 and not pub.delta_since(2).is_delta  # another geometry: whole
    # positions and documents at each publication: 800 for 100, 800 for 110, 888 for 111
    assert (pub.published_positions, pub.published_documents) == (800 + 800 + 888, 100 + 110 + 111)
    assert pub.mean_positions_per_document == 2488 / 321
    fixed = SummaryPublisher(filled_cache(40), origin=2)  # no tolerance: the cache's own sizing stays
    assert fixed.mean_positions_per_document is None
    assert fixed.publish().num_cells == 8 * 64 and fixed.mean_positions_per_document == 512 / 40


def test_resize_tolerance_checked():
    with pytest.raises(ValueError, match="resize_tolerance must be a fraction > 0 or None, got 0"):
        SummaryPublisher(DocumentCache(1000), resize_tolerance=0)


def test_prior_estimates_stay_above_zero():
    """Laplace's rule of succession over the effective sample: ``(x + 1) / (n_eff + 2)``, never 0. Mixture: no
    "maybe" at all (q = 0 < FPR) gave a prior of exactly 0 before; outcomes: every query missed."""
    summaries = summaries_for([range(0, 40)], kind="counters")
    peers = [PeerState("a", summaries[0], 1.0, True)]
    mixture = ParadoxPolicy(origin_cost=1000.0, prior_window=20)
    absent_keys = [url(i) for i in range(1000, 1200) if not summaries[0].may_contain(url(i))][:100]
    for key in absent_keys:
        assert mixture.order(key, peers) == []
    absent = OnlinePrior(window=20)
    absent.record_absent(100)
    assert absent.effective_samples == pytest.approx((1 - 0.95 ** 100) * 1.95 / (0.05 * (1 + 0.95 ** 100)))
    prior = mixture.prior("a", summaries[0])
    assert 0 < prior < 0.05
    # the peer holds url(1): its counters are evidence enough for a posterior above 1/omega
    assert mixture.order(url(1), peers) == ["a"]
    outcomes = ParadoxPolicy(origin_cost=10.0, prior_window=20, prior_estimator="outcomes")
    for _ in range(200):
        outcomes.observe("a", url(1), False)
    n_eff = OnlinePrior(window=20)
    n_eff.record_absent(200)
    assert outcomes.prior("a") == pytest.approx(1 / (n_eff.effective_samples + 2))
