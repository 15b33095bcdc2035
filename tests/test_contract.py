"""Every structure walked through the one contract of docs/architecture.md ("The contract"): the same names, the same
signatures, ``threads=`` accepted, the same errors; the names of earlier releases are gone. Where an operation cannot
apply (the table says why), the test checks that it is refused with a reason. The served filters of
``bloomwise.redis`` (their cells live on a Redis server; their constructors take the client and a name first) are
checked at the end, against the local structure whose payload they hold."""
from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest

from bloomwise import (BloomFilter, CountingBloomFilter, FormatError, GeneralizedBloomFilter, RetouchedBloomFilter,
                       ScalableBloomFilter)
from bloomwise import VariableIncrementCountingBloomFilter as VICBF
from bloomwise.paradox import (SelectiveBloomFilter, SelectiveCountingBloomFilter,
                               SelectiveVariableIncrementCountingBloomFilter)

GBF, RBF = GeneralizedBloomFilter, RetouchedBloomFilter
STRUCTURES = [BloomFilter, CountingBloomFilter, VICBF, ScalableBloomFilter, GBF, RBF]
SIZED = [BloomFilter, CountingBloomFilter, VICBF, RBF]  # from_size(num_cells, num_hashes); GBF splits k in two
MAPPED = [BloomFilter, CountingBloomFilter, VICBF]      # open(): the compiled cores' memory maps
KEYS = [f"key{i}" for i in range(500)]


def built(cls, capacity=1000, fpr=0.01, **options):
    return cls(capacity, fpr, **options)


@pytest.mark.parametrize("cls", STRUCTURES)
def test_construction_by_accuracy(cls):
    parameters = list(inspect.signature(cls.__init__).parameters)
    assert parameters[1:3] == ["capacity", "fpr"]
    for name in ("layout", "seed", "key", "hash_scheme"):
        assert inspect.signature(cls.__init__).parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    f = built(cls)
    assert f.capacity == 1000 and f.fpr == 0.01
    assert f.num_keys == 0 and f.seed == 0 and f.hash_scheme == "xxh3"
    assert isinstance(f.num_cells, int) and f.num_cells > 0 and isinstance(f.num_hashes, int)
    assert f.nbytes > 0 and f.layout in ("classic", "partitioned", "blocked")


@pytest.mark.parametrize("cls", SIZED)
def test_construction_by_size(cls):
    parameters = list(inspect.signature(cls.from_size).parameters)
    assert parameters[:2] == ["num_cells", "num_hashes"]
    f = cls.from_size(4096, 3)
    assert f.num_cells == 4096 and f.num_hashes == 3 and f.capacity is None and f.fpr is None
    assert f.layout == built(cls).layout  # one default layout per class, whichever way it is built
    with pytest.raises(TypeError):
        cls.from_size(4096)


def test_generalized_construction_by_size_splits_k():
    assert list(inspect.signature(GBF.from_size).parameters)[:3] == ["num_cells", "num_set_hashes",
                                                                     "num_reset_hashes"]
    f = GBF.from_size(4096, 3, 1)
    assert (f.num_cells, f.num_hashes, f.capacity, f.fpr, f.layout) == (4096, 4, None, None, "classic")


def test_blocked_from_size_refuses_a_size_the_layout_cannot_have():
    with pytest.raises(ValueError, match=r"num_cells must be a multiple of 512 for the blocked layout.*nearest: 1,024"):
        BloomFilter.from_size(1000, 3)
    assert BloomFilter.from_size(1000, 3, layout="classic").num_cells == 1000


@pytest.mark.parametrize("cls, old", [(BloomFilter, "num_bits"), (CountingBloomFilter, "num_counters"),
                                      (VICBF, "num_positions"), (GBF, "num_bits"), (RBF, "num_bits")])
def test_names_of_earlier_releases_are_gone(cls, old):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
        if cls is GBF:
            cls.from_size(num_set_hashes=3, num_reset_hashes=1, **{old: 4096})
        else:
            cls.from_size(num_hashes=3, **{old: 4096})
    assert not hasattr(cls.from_size(4096, 3, 1) if cls is GBF else cls.from_size(4096, 3), old)


def test_the_explicit_hash_filter_and_the_selective_wrappers_speak_of_num_cells():
    functions = [lambda x: x % 5, lambda x: (2 * x + 3) % 5]
    assert BloomFilter.from_hash_functions(num_cells=5, functions=functions).num_cells == 5
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_bits'"):
        BloomFilter.from_hash_functions(num_bits=5, functions=functions)

    class OldCounting:  # a duck-typed counting filter that still says num_counters
        num_counters, num_hashes = 64, 3
        add = update = remove = counters = counters_many = contains_many = __contains__ = None

    with pytest.raises(TypeError, match=r"it has no num_cells\)"):
        SelectiveCountingBloomFilter(OldCounting(), prior=0.5, cost=1.0)


def test_scalable_and_selective_names_of_earlier_releases_are_gone():
    with pytest.raises(TypeError, match="unexpected keyword argument 'initial_capacity'"):
        ScalableBloomFilter(initial_capacity=100, fpr=0.01)
    f = ScalableBloomFilter(100, 0.01)
    assert not hasattr(f, "initial_capacity") and not hasattr(f, "num_bits")
    s = SelectiveBloomFilter({"num_cells": 4096, "num_hashes": 3, "layout": "partitioned"}, prior=0.5, cost=1.0)
    assert not hasattr(s, "num_inserted") and not hasattr(s, "fpr")
    c = SelectiveCountingBloomFilter({"num_cells": 4096, "num_hashes": 3}, prior=0.5, cost=1.0)
    assert not hasattr(c, "num_items")


@pytest.mark.parametrize("cls", STRUCTURES)
@pytest.mark.parametrize("threads", [None, 1, 2])
def test_batches_take_threads_and_update_returns_none(cls, threads):
    f = built(cls)
    assert f.update(KEYS, threads=threads) is None
    assert f.update(np.arange(100, dtype=np.uint64), threads=threads) is None
    answers = f.contains_many(KEYS, threads=threads)
    assert answers.dtype == np.bool_ and answers.shape == (len(KEYS),)
    if cls is not GBF:  # a Generalized filter has false negatives by design: later keys reset earlier keys' bits
        assert answers.all()
    assert f.num_keys == len(KEYS) + 100
    added = f.add("one more")  # True when certainly new; a Generalized filter cannot tell (None)
    assert (added is None) if cls is GBF else added in (True, False)
    assert "one more" in f
    assert f.num_keys == len(KEYS) + 101


@pytest.mark.parametrize("cls", STRUCTURES)
@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_bad_threads_are_the_same_error_everywhere(cls, threads):
    f = built(cls)
    with pytest.raises(ValueError, match="threads must be a positive int or None"):
        f.update(KEYS, threads=threads)
    with pytest.raises(ValueError, match="threads must be a positive int or None"):
        f.contains_many(KEYS, threads=threads)


@pytest.mark.parametrize("cls", STRUCTURES)
def test_rates_target_and_estimate(cls):
    f = built(cls, 1000, 0.02)
    assert f.fpr == 0.02
    f.update(KEYS)
    assert 0.0 < f.estimated_fpr() < 0.02


@pytest.mark.parametrize("cls", STRUCTURES)
def test_the_same_errors_for_bad_arguments(cls):
    for capacity, error, message in ((0, ValueError, "capacity must be at least 1, got 0"),
                                     (1.5, TypeError, "capacity must be an int"),
                                     (True, TypeError, "capacity must be an int")):
        with pytest.raises(error, match=message):
            cls(capacity, 0.01)
    for fpr in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="fpr must be a probability strictly between 0 and 1"):
            cls(100, fpr)
    with pytest.raises(ValueError, match="layout must be one of"):
        cls(100, 0.01, layout="diagonal")
    with pytest.raises(ValueError, match="capacity=1e\\+30 .* largest"):
        cls(10 ** 30, 0.01)


@pytest.mark.parametrize("cls", STRUCTURES)
def test_copies_compatibility_equality_and_persistence(cls, tmp_path):
    f = built(cls, seed=7)
    f.update(KEYS)
    twin = f.copy()
    assert twin == f and twin.is_compatible(f) and twin.num_keys == f.num_keys and twin.fpr == f.fpr
    other_seed = built(cls, seed=8)
    assert not f.is_compatible(other_seed) and f != other_seed
    for again in (cls.from_bytes(f.to_bytes()), pickle.loads(pickle.dumps(f))):
        assert again == f and again.num_keys == f.num_keys and again.capacity == f.capacity and again.fpr == f.fpr
    f.save(tmp_path / "f.bin")
    loaded = cls.load(tmp_path / "f.bin")
    assert loaded == f and loaded.num_keys == f.num_keys
    with pytest.raises(FormatError, match=str(tmp_path / "g.bin")):
        (tmp_path / "g.bin").write_bytes(b"not a filter at all")
        cls.load(tmp_path / "g.bin")


def test_generalized_has_no_union_and_says_why():
    a, b = built(GBF, seed=1), built(GBF, seed=1)
    for union in (lambda: a | b, lambda: a.__ior__(b)):
        with pytest.raises(TypeError, match="no union: its bits depend on the order of the insertions"):
            union()
    assert a.is_compatible(b) and not a.is_compatible(built(GBF, seed=2))
    assert not hasattr(GBF, "union") and not hasattr(GBF, "intersection")


@pytest.mark.parametrize("cls", [c for c in STRUCTURES if c is not GBF])
def test_set_operations_share_their_errors(cls):
    a, b = built(cls, seed=1), built(cls, seed=1)
    a.update(KEYS[:250])
    b.update(KEYS[250:])
    union = a | b
    assert union == a.union(b) == b | a and all(key in union for key in KEYS)
    assert union.num_keys == a.num_keys + b.num_keys
    in_place = a.copy()
    in_place |= b
    assert in_place == union
    with pytest.raises(ValueError, match=r"cannot union incompatible filters \(seed: 1 vs 2\)"):
        a | built(cls, seed=2)
    with pytest.raises(TypeError, match=f"cannot union a {cls.__name__} with int"):
        a.union(5)
    if cls in (BloomFilter, CountingBloomFilter):
        both = a & b
        assert both == a.intersection(b) == b & a
        assert a & a == a
        with pytest.raises(ValueError, match=r"cannot intersect incompatible filters \(seed: 1 vs 2\)"):
            a & built(cls, seed=2)
        with pytest.raises(TypeError, match=f"cannot intersect a {cls.__name__} with int"):
            a.intersection(5)
    elif cls is ScalableBloomFilter:  # a common key may sit in different stages of each: no stage-wise AND
        for intersect in (lambda: a & b, lambda: a.intersection(b), lambda: a.__iand__(b)):
            with pytest.raises(TypeError, match="ScalableBloomFilter has no intersection"):
                intersect()
    else:  # the minimum of two counts has no matching sum of increments
        assert not hasattr(cls, "intersection")
        with pytest.raises(TypeError):
            a & b


def test_bloom_bits_of_a_key_are_tuples_of_ints():
    f = built(BloomFilter)
    f.add("apple")
    assert f.bits("apple") == (1,) * f.num_hashes and all(type(b) is int for b in f.bits("apple"))
    assert 0 in f.bits("pear") and not hasattr(f, "counters")


@pytest.mark.parametrize("cls", [CountingBloomFilter, VICBF])
def test_counters_are_tuples_of_ints(cls):
    f = built(cls)
    f.add("apple")
    counters = f.counters("apple")
    assert isinstance(counters, tuple) and len(counters) == f.num_hashes
    assert all(type(c) is int and c >= 1 for c in counters)
    assert all(type(c) is int for c in f.counters("pear"))


def test_bloom_filter_num_keys_and_new_keys():
    f = BloomFilter(100, 0.01)
    f.update(["a", "a", "b"])
    assert (f.num_keys, f.num_new_keys) == (3, 2)


SELECTIVE = [
    (SelectiveBloomFilter, {"num_cells": 4096, "num_hashes": 3, "layout": "partitioned"}),
    (SelectiveCountingBloomFilter, {"num_cells": 4096, "num_hashes": 3, "layout": "partitioned"}),
    (SelectiveVariableIncrementCountingBloomFilter, {"num_cells": 4096, "num_hashes": 3, "layout": "partitioned"}),
]


@pytest.mark.parametrize("cls, params", SELECTIVE)
def test_selective_wrappers_follow_the_contract(cls, params):
    s = cls(params, prior=0.5, cost=1.0)
    assert s.num_cells == 4096 and s.num_hashes == 3
    assert s.update(KEYS, threads=2) is None
    assert s.contains_many(KEYS, threads=2).all()
    assert s.num_keys == len(KEYS)
    with pytest.raises(ValueError, match="threads must be a positive int or None"):
        s.update(KEYS, threads=0)
    for name in ("add", "remove", "discard"):  # the key is positional, as in the structures they wrap
        if hasattr(s, name):
            with pytest.raises(TypeError, match="positional-only"):
                getattr(s, name)(key=KEYS[0])


def cells(f, key):
    return f.bits(key) if isinstance(f, BloomFilter) else f.counters(key)


@pytest.mark.parametrize("cls", MAPPED)
def test_open_maps_every_sized_structure(cls, tmp_path):
    f = built(cls, seed=3)
    f.update(KEYS)
    path = tmp_path / "f.bin"
    f.save(path)
    with cls.open(path) as shared:
        assert shared == f and shared.num_keys == f.num_keys and shared.path == str(path)
        assert shared.contains_many(KEYS).all() and cells(shared, "key7") == cells(f, "key7")
        with pytest.raises(TypeError, match="read-only"):
            shared.add("new key")
    with cls.open(path, "r+") as writer:
        writer.add("new key")
        with cls.open(path) as reader:  # another map of the same file sees the write at once
            assert "new key" in reader
    again = cls.load(path)
    assert "new key" in again and again.num_keys == f.num_keys + 1
    with pytest.raises(ValueError, match="mode must be 'r' or 'r\\+'"):
        cls.open(path, "w")


@pytest.mark.parametrize("cls, counter_bits", [(CountingBloomFilter, {"counter_bits": 4}), (VICBF, {})])
def test_open_refuses_bad_padding_like_load(cls, counter_bits, tmp_path):
    from bloomwise import _format
    f = cls.from_size(101, 3, **counter_bits)  # the last word is not full: padding follows the cells
    payload = bytearray(f.payload_view())
    payload[-1] |= 0x80
    path = tmp_path / "bad.bin"
    path.write_bytes(_format.dumps(f._header(), payload))
    for read in (cls.load, cls.open):
        with pytest.raises(FormatError, match=f"{path}: .*padding"):
            read(path)
    cls.from_size(64, 2).save(path)  # the failed open left the file closable and replaceable
    with cls.open(path, "r+") as g:
        g.add("x")


@pytest.mark.parametrize("cls", STRUCTURES)
def test_the_key_is_positional_in_single_key_methods(cls):
    """add / remove / discard take the key as their one positional argument, like set's (the cheapest call)."""
    f = built(cls)
    for name in ("add", "remove", "discard"):
        if hasattr(f, name):
            with pytest.raises(TypeError, match="no keyword arguments|positional-only"):
                getattr(f, name)(key="x")
    f.add("x")
    assert "x" in f


# ---- the served filters (bloomwise.redis): a server holds the cells ----------------------------------------------------
SERVED_TWINS = {"RedisBloomFilter": BloomFilter, "RedisCountingBloomFilter": CountingBloomFilter}


def served_classes():
    """name -> class; skips without redis-py (the ``redis`` extra), which ``bloomwise.redis`` imports."""
    pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
    import bloomwise.redis as served

    return {name: getattr(served, name) for name in SERVED_TWINS}


@pytest.mark.parametrize("name", sorted(SERVED_TWINS))
def test_served_filters_follow_the_contract(name, redis_client):
    """The same names as the local structure they serve (their cells are its payload): by accuracy and by size,
    num_cells, num_hashes, layout, seed, hash_scheme, capacity, fpr, nbytes; update returns None."""
    cls, local_cls = served_classes()[name], SERVED_TWINS[name]
    parameters = list(inspect.signature(cls.__init__).parameters)
    assert parameters[1:5] == ["client", "name", "capacity", "fpr"]
    for keyword in ("layout", "seed", "hash_scheme"):
        assert inspect.signature(cls.__init__).parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(cls.from_size).parameters)[2:4] == ["num_cells", "num_hashes"]
    served, local = cls(redis_client, "by-accuracy", 1000, 0.02, seed=5), local_cls(1000, 0.02, seed=5)
    assert served.layout == local.layout  # one default layout per class, as the local structure's
    for attribute in ("num_cells", "num_hashes", "layout", "seed", "hash_scheme", "capacity", "fpr", "nbytes"):
        assert getattr(served, attribute) == getattr(local, attribute), attribute
    assert served.update(KEYS) is None
    answers = served.contains_many(KEYS)
    assert answers.dtype == np.bool_ and answers.shape == (len(KEYS),) and answers.all() and KEYS[0] in served
    sized, local_sized = cls.from_size(redis_client, "by-size", 4096, 3), local_cls.from_size(4096, 3)
    assert (sized.num_cells, sized.num_hashes, sized.capacity, sized.fpr) == (4096, 3, None, None)
    assert sized.layout == local_sized.layout == served.layout
    with pytest.raises(TypeError):
        cls.from_size(redis_client, "by-size", 4096)


@pytest.mark.parametrize("name, old", [("RedisBloomFilter", "num_bits"),
                                       ("RedisCountingBloomFilter", "num_counters")])
def test_served_names_of_earlier_releases_are_gone(name, old, redis_client):
    cls = served_classes()[name]
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
        cls.from_size(redis_client, "old", num_hashes=3, **{old: 4096})
    assert not hasattr(cls.from_size(redis_client, "old", 4096, 3), old)


@pytest.mark.parametrize("name", sorted(SERVED_TWINS))
def test_served_filters_raise_the_same_errors_for_bad_arguments(name, redis_client):
    cls = served_classes()[name]
    for capacity, error, message in ((0, ValueError, "capacity must be at least 1, got 0"),
                                     (1.5, TypeError, "capacity must be an int"),
                                     (True, TypeError, "capacity must be an int")):
        with pytest.raises(error, match=message):
            cls(redis_client, "bad", capacity, 0.01)
    for fpr in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="fpr must be a probability strictly between 0 and 1"):
            cls(redis_client, "bad", 100, fpr)
    with pytest.raises(ValueError, match="layout must be one of"):
        cls(redis_client, "bad", 100, 0.01, layout="diagonal")
    assert redis_client.keys("bad*") == []  # nothing was created on the server


@pytest.mark.parametrize("name", sorted(SERVED_TWINS))
def test_served_filters_copy_compare_and_estimate_like_the_local_structure(name, redis_client):
    """copy(name) (a new key, byte for byte), is_compatible, estimated_fpr() (the local structure's, from the same
    fill), threads= accepted with the contract's check."""
    import bloomwise.redis as served_module

    cls, local_cls = served_classes()[name], SERVED_TWINS[name]
    served = cls(redis_client, "orig", 2000, 0.01, seed=4)
    served.update(KEYS)
    local = served_module.from_redis(redis_client, "orig")
    twin = served.copy("twin")
    assert type(twin) is cls and twin.name == "twin" and served_module.from_redis(redis_client, "twin") == local
    assert served_module.from_redis(redis_client, "twin").num_keys == local.num_keys
    with pytest.raises(served_module.FilterMismatchError, match="'twin' already exists.*replace=True"):
        served.copy("twin")
    served.update(["later"])  # the copy is its own filter
    assert "later" in served and "later" not in twin
    assert served.copy("twin", replace=True).contains_many(["later"]).all() and "later" in twin
    assert served.is_compatible(twin) and served.is_compatible(local) and twin.is_compatible(served)
    assert not served.is_compatible(local_cls(2000, 0.01, seed=5)) and not served.is_compatible("orig")
    assert not served.is_compatible(cls(redis_client, "other-seed", 2000, 0.01, seed=5))
    assert served.estimated_fpr() == served_module.from_redis(redis_client, "orig").estimated_fpr() > 0
    assert cls(redis_client, "empty", 2000, 0.01).estimated_fpr() == 0.0
    for threads in (None, 1, 2):
        assert served.update(KEYS, threads=threads) is None
        assert served.contains_many(KEYS, threads=threads).all()
    for threads in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="threads must be a positive int or None"):
            served.update(KEYS, threads=threads)
        with pytest.raises(ValueError, match="threads must be a positive int or None"):
            served.contains_many(KEYS, threads=threads)


def test_served_hashing_in_threads_is_the_hashing_of_one_thread():
    pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
    from bloomwise._native.bloom import hash_many
    from bloomwise.redis.filters import THREAD_MIN_KEYS, hash_in_threads

    keys = np.arange(3 * THREAD_MIN_KEYS + 17, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for threads in (2, 3, 8):
        assert np.array_equal(hash_in_threads(keys, 5, 2, threads), hash_many(keys, 5, None, 2))
    square = keys[:3 * THREAD_MIN_KEYS].reshape(-1, 2)  # the shape of a numpy input is kept
    assert np.array_equal(hash_in_threads(square, 5, 2, 4), hash_many(square, 5, None, 2))


def test_served_bit_filters_combine_on_the_server(redis_client):
    """union / intersection (new keys), |= and &= (in place; a served or a local other): BITOP, equal to the local
    structures' | and &; the local errors for incompatible filters; a | b and counting filters refused with the
    reason."""
    import bloomwise.redis as served_module

    cls = served_classes()["RedisBloomFilter"]
    a, b = cls(redis_client, "a", 1000, 0.01, seed=1), cls(redis_client, "b", 1000, 0.01, seed=1)
    a.update(KEYS[:250])
    b.update(KEYS[250:])
    local_a, local_b = (served_module.from_redis(redis_client, n) for n in ("a", "b"))
    union = a.union(b, "a-or-b")
    assert served_module.from_redis(redis_client, "a-or-b") == local_a | local_b
    assert union.keys_added == a.keys_added + b.keys_added
    both = a.intersection(b, "a-and-b")
    assert served_module.from_redis(redis_client, "a-and-b") == local_a & local_b
    assert both.keys_added == a.keys_added
    with pytest.raises(served_module.FilterMismatchError, match="already exists"):
        a.union(b, "a-or-b")
    in_place = a.copy("in-place")
    in_place |= b
    assert served_module.from_redis(redis_client, "in-place") == local_a | local_b
    in_place &= local_a  # a local other: sent once as temporary keys
    assert served_module.from_redis(redis_client, "in-place") == (local_a | local_b) & local_a
    in_place |= local_b
    assert served_module.from_redis(redis_client, "in-place") == ((local_a | local_b) & local_a) | local_b
    assert not [k for k in redis_client.keys("*combine*")]  # the temporary keys are gone
    with pytest.raises(ValueError, match=r"cannot union incompatible filters \(seed: 1 vs 2\)"):
        a.union(cls(redis_client, "seed-2", 1000, 0.01, seed=2), "x")
    with pytest.raises(ValueError, match=r"cannot intersect incompatible filters \(seed: 1 vs 2\)"):
        a &= BloomFilter(1000, 0.01, seed=2)
    with pytest.raises(TypeError, match="cannot union a RedisBloomFilter with int"):
        a.union(5, "x")
    with pytest.raises(TypeError, match=r"stored on the server under a name: f.union\(other, name\)"):
        a | b
    with pytest.raises(TypeError, match=r"f.intersection\(other, name\)"):
        a & b
    counting = served_classes()["RedisCountingBloomFilter"](redis_client, "counting", 1000, 0.01)
    for combine in (lambda: counting | counting, lambda: counting & counting, lambda: counting.union(counting, "u")):
        with pytest.raises((TypeError, AttributeError)):
            combine()
    assert not hasattr(counting, "union") and not hasattr(counting, "intersection")
