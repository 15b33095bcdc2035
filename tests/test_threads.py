"""Threaded batch calls and the kernel sets: threads=N sets the bits and counts of one thread under every kernel set,
each thread owns whole blocks, and $BLOOMWISE_KERNELS chooses the kernel set at import without changing a bit."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bloomwise import BloomFilter
from bloomwise._native import bloom as bloom_native
from bloomwise._native import hashes as hashes_native

AVAILABLE = bloom_native.kernel_sets()


@contextlib.contextmanager
def kernels(name: str):
    """Run a block under one kernel set, switched in this process ("avx2+avx512", "avx2" or "scalar")."""
    if name not in AVAILABLE:
        pytest.skip(f"this CPU cannot run the {name} kernels")
    before = bloom_native.batch_kernels()
    bloom_native._use_simd(name != "scalar")
    hashes_native._use_simd512(name == "avx2+avx512")
    try:
        assert bloom_native.batch_kernels() == name
        yield
    finally:
        bloom_native._use_simd(before != "scalar")
        hashes_native._use_simd512("avx512" in before)


# ---- threads=N: the bits and the count of one thread ------------------------------------------------------------------
KEY_KINDS = ("uint64", "int64", "S", "U", "list")


def as_kind(values: np.ndarray, kind: str):
    if kind == "uint64":
        return values.astype(np.uint64)
    if kind == "int64":
        return values.astype(np.int64)
    if kind == "list":
        return values.astype(np.int64).tolist()
    return values.astype(kind)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4096, 30_000), num_blocks=st.sampled_from([1, 2, 3, 7, 1000, 40_000]),
       k=st.integers(1, 16), nthreads=st.integers(2, 6), kind=st.sampled_from(KEY_KINDS),
       distinct=st.integers(1, 50_000), seed=st.integers(0, 2**32 - 1),
       kernel_set=st.sampled_from(AVAILABLE))
def test_threaded_blocked_insert_is_bit_identical_to_one_thread(n, num_blocks, k, nthreads, kind, distinct, seed,
                                                                kernel_set):
    """For any batch (repeats, few or many blocks, fewer blocks than threads, every key kind), any k and thread
    count, under every kernel set this CPU runs: the bits and the count of new keys of one thread."""
    values = np.random.default_rng(seed).integers(-distinct, distinct, size=n)
    keys = as_kind(values, kind)
    with kernels(kernel_set):
        serial = BloomFilter.from_size(num_blocks * 512, k, layout="blocked", seed=seed)
        serial.update(keys)
        threaded = BloomFilter.from_size(num_blocks * 512, k, layout="blocked", seed=seed)
        threaded.update(keys, threads=nthreads)
    assert threaded == serial
    assert threaded.num_new_keys == serial.num_new_keys
    assert threaded._insertions_count == serial._insertions_count == n


@pytest.mark.parametrize("kernel_set", ["avx2+avx512", "avx2", "scalar"])
@pytest.mark.parametrize("layout", ["blocked", "partitioned", "classic"])
def test_threads_two_equals_threads_one_at_scale(layout, kernel_set):
    """200k numpy uint64 keys (25 rounds of a two-thread blocked insert), fixed seed, every layout and kernel set:
    the same bits and batch answers with threads=2 as with one thread, and the same bits in every kernel set. The
    count of new keys is exact for the blocked layout (classic and partitioned threads count per slice or per
    range: it only drives the capacity warning)."""
    keys = (np.arange(200_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) & np.uint64(2**63 - 1)
    absent = keys + np.uint64(1)
    with kernels(kernel_set):
        one = BloomFilter(200_000, 0.01, layout=layout, seed=5)
        one.update(keys)
        two = BloomFilter(200_000, 0.01, layout=layout, seed=5)
        two.update(keys, threads=2)
        assert two == one
        if layout == "blocked":
            assert two.num_new_keys == one.num_new_keys
        assert (two.contains_many(absent, threads=2) == one.contains_many(absent)).all()
        assert two.contains_many(keys, threads=2).all()
    reference = BloomFilter(200_000, 0.01, layout=layout, seed=5)
    reference.update(keys)
    assert one == reference


@pytest.mark.parametrize("nthreads", [1, 2, 3, 4, 5, 17, 64])
@pytest.mark.parametrize("num_blocks", [1, 3, 1000, 2**32 - 1])
@pytest.mark.parametrize("kernel_set", ["avx2+avx512", "avx2", "scalar"])
def test_each_thread_gets_exactly_the_keys_of_its_blocks(nthreads, num_blocks, kernel_set):
    """A share's hashes grouped by owner: thread u gets, in order, those whose block is in
    [num_blocks * u // T, num_blocks * (u + 1) // T), by selection passes (up to 4 threads: AVX-512, AVX2 or
    scalar) or by a counting sort on owner ids (more threads); every tail length of the vector loops."""
    hashes = np.random.default_rng(num_blocks + nthreads).integers(0, 2**64, size=1003, dtype=np.uint64)
    hashes[:4] = [0, 2**64 - 1, 2**32 - 1, 2**32]
    blocks = ((hashes >> np.uint64(32)) * np.uint64(num_blocks)) >> np.uint64(32)
    cuts = [num_blocks * u // nthreads for u in range(nthreads + 1)]
    with kernels(kernel_set):
        for n in (0, 1, 3, 4, 5, 7, 8, 9, len(hashes)):
            groups = bloom_native._group_by_owner(hashes[:n], num_blocks, nthreads)
            assert len(groups) == nthreads
            for u, group in enumerate(groups):
                mine = (blocks[:n] >= cuts[u]) & (blocks[:n] < cuts[u + 1])
                assert group.tolist() == hashes[:n][mine].tolist(), (u, n)


def test_grouping_refuses_bad_arguments():
    hashes = np.zeros(3, dtype=np.uint64)
    for nthreads, num_blocks in ((0, 5), (65, 5), (2, 0), (2, 2**32)):
        with pytest.raises(ValueError, match="nthreads must be in"):
            bloom_native._group_by_owner(hashes, num_blocks, nthreads)


@pytest.mark.parametrize("nthreads", [1, 2, 5, 64])
def test_the_work_of_many_threads_done_in_order_by_one(nthreads):
    """The threaded insert's tasks for 1 to 64 threads (64: the counting sort, most owners idle on 3 blocks), run
    in order by one thread: the bits and count of a plain insert."""
    for num_blocks in (3, 5000):
        keys = np.random.default_rng(nthreads).integers(0, 20_000, size=25_000, dtype=np.uint64)
        serial = BloomFilter.from_size(num_blocks * 512, 6, layout="blocked")
        serial.update(keys)
        tasks = BloomFilter.from_size(num_blocks * 512, 6, layout="blocked")
        counts = tasks._update_pipelined_serially(keys, nthreads)
        assert len(counts) == nthreads
        assert tasks == serial
        assert tasks.num_new_keys == serial.num_new_keys == sum(counts)


def test_an_insert_completes_when_no_thread_can_be_started(monkeypatch):
    """If the OS refuses the extra threads, the calling thread does every task: the bits and count of one thread."""
    keys = np.arange(100_000, dtype=np.uint64)
    serial = BloomFilter(100_000, 0.01)
    serial.update(keys)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    threaded = BloomFilter(100_000, 0.01)
    threaded.update(keys, threads=4)
    assert threaded == serial
    assert threaded.num_new_keys == serial.num_new_keys


# ---- $BLOOMWISE_KERNELS ------------------------------------------------------------------------------------------------
PROBE = """
import hashlib, json
import numpy as np
from bloomwise import BloomFilter
from bloomwise._native import bloom
keys = (np.arange(50_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
digests = {}
for layout in ("blocked", "classic"):
    for threads in (None, 2):
        f = BloomFilter(100_000, 0.01, layout=layout, seed=11)
        f.update(keys, threads=threads)
        f.update(keys.astype(np.int64) - 25_000, threads=threads)
        digests[f"{layout} threads={threads}"] = [hashlib.sha256(f._payload()).hexdigest(), f.num_new_keys]
from bloomwise._native import scalable
print(json.dumps({"kernels": bloom.batch_kernels(), "sets": list(bloom.kernel_sets()), "scalable": scalable.kernels(),
                  "hashes": hashlib.sha256(bloom.hash_many(keys).tobytes()).hexdigest(), "digests": digests}))
"""


def probe(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BLOOMWISE_KERNELS"}
    if value is not None:
        env["BLOOMWISE_KERNELS"] = value
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)


def digests_here() -> dict:
    keys = np.arange(50_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    out = {}
    for layout in ("blocked", "classic"):
        for threads in (None, 2):
            f = BloomFilter(100_000, 0.01, layout=layout, seed=11)
            f.update(keys, threads=threads)
            f.update(keys.astype(np.int64) - 25_000, threads=threads)
            out[f"{layout} threads={threads}"] = [hashlib.sha256(f._payload()).hexdigest(), f.num_new_keys]
    return out


@pytest.mark.parametrize("value", ["auto", "", "avx2+avx512", "AVX2", " avx2 ", "scalar"])
def test_the_environment_variable_chooses_the_kernel_set_and_no_bit_changes(value):
    """BLOOMWISE_KERNELS (any case, spaces around) gives that kernel set, reported by batch_kernels(); auto or empty
    the best this CPU runs. The filters' bits, counts and the hashes are those of the default set."""
    name = value.strip().lower()
    if name not in ("", "auto") and name not in AVAILABLE:
        pytest.skip(f"this CPU cannot run the {name} kernels")
    done = probe(value)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["kernels"] == (AVAILABLE[0] if name in ("", "auto") else name)
    # the scalable filter's own kernels follow the same choice (it names them "avx512", "avx2", "scalar")
    assert got["scalable"] == {"avx2+avx512": "avx512"}.get(got["kernels"], got["kernels"])
    assert got["sets"] == list(AVAILABLE)
    keys = np.arange(50_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    assert got["hashes"] == hashlib.sha256(bloom_native.hash_many(keys).tobytes()).hexdigest()
    assert got["digests"] == digests_here()


def test_unset_means_the_best_kernel_set():
    done = probe(None)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernels"] == AVAILABLE[0] == bloom_native.batch_kernels()


@pytest.mark.parametrize("value", ["avx3", "avx512", "sse", "avx2,avx512", "1"])
def test_an_unknown_kernel_set_is_refused_with_the_allowed_names(value):
    done = probe(value)
    assert done.returncode != 0
    assert f"BLOOMWISE_KERNELS={value!r} is not a kernel set: expected one of auto, avx2+avx512, avx2, scalar" \
        in done.stderr


def test_a_kernel_set_this_cpu_lacks_is_refused():
    missing = [name for name in hashes_native.KERNEL_SETS if name not in AVAILABLE]
    if not missing:
        pytest.skip("this CPU runs every kernel set")
    done = probe(missing[0])
    assert done.returncode != 0
    assert "this CPU cannot run that kernel set; it runs " + ", ".join(AVAILABLE) in done.stderr
