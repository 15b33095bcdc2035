"""bloomwise.dask.build: the same bits as a local build, on the local schedulers and on a distributed cluster."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

dask = pytest.importorskip("dask", reason="the Dask tests need dask (pip install 'bloomwise[dask]')")
db = pytest.importorskip("dask.bag")

from bloomwise import BloomFilter, CapacityWarning, CountingBloomFilter  # noqa: E402
from bloomwise.dask import build, local_cluster  # noqa: E402

KEYS = [f"https://example.com/page/{i}" for i in range(20_000)]


def _local(keys, capacity, fpr, **options):
    f = BloomFilter(capacity, fpr, **options)
    f.update(keys)
    return f


@pytest.mark.parametrize("layout", ["blocked", "classic", "partitioned"])
@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_bag_build_is_bit_identical_to_a_local_build(layout, scheduler):
    bag = db.from_sequence(KEYS, npartitions=13)
    f = build(bag, 20_000, 0.01, layout=layout, seed=7, split_every=3, scheduler=scheduler)
    local = _local(KEYS, 20_000, 0.01, layout=layout, seed=7)
    assert f == local
    assert bytes(f._payload()) == bytes(local._payload())
    assert f.layout == layout and f.seed == 7 and f.num_cells == local.num_cells
    assert f.contains_many(KEYS).all()


def test_series_dataframe_and_array_inputs():
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    da = pytest.importorskip("dask.array")
    ints = np.arange(-5_000, 25_000, 3, dtype=np.int64)
    frame = pd.DataFrame({"id": ints, "url": [f"u{i}" for i in ints]})
    ddf = dd.from_pandas(frame, npartitions=6)
    by_int = build(ddf["id"], len(ints), 0.001, scheduler="sync")
    assert by_int == _local(ints, len(ints), 0.001)
    assert by_int == _local([int(i) for i in ints], len(ints), 0.001)  # numpy ints hash as the Python ints
    assert build(ddf["id"].astype("Int64"), len(ints), 0.001, scheduler="sync") == by_int  # nullable, no NA
    by_column = build(ddf, len(ints), 0.001, column="url", scheduler="threads")
    assert by_column == _local(list(frame["url"]), len(ints), 0.001)
    by_array = build(da.from_array(ints, chunks=4_000), len(ints), 0.001, scheduler="sync")
    assert by_array == by_int
    with pytest.raises(KeyError, match="no column 'nope'; its columns: \\['id', 'url'\\]"):
        build(ddf, 10, 0.01, column="nope")
    with pytest.raises(ValueError, match="pass column="):
        build(ddf, 10, 0.01, scheduler="sync")


def test_counting_build_adds_counters_with_sticky_saturation():
    # "hot" 40 times and "warm" 9 times over 8 partitions: the hot key's counters saturate at 15 in the union
    # although no single partition reaches 15 for it.
    keys = [f"k{i}" for i in range(3_000)] + ["hot"] * 40 + ["warm"] * 9
    rng = np.random.default_rng(5)
    keys = [keys[i] for i in rng.permutation(len(keys))]
    bag = db.from_sequence(keys, npartitions=8)
    f = build(bag, 3_100, 0.01, counting=True, split_every=2, scheduler="threads")
    local = CountingBloomFilter(3_100, 0.01)
    local.update(keys)
    assert isinstance(f, CountingBloomFilter)
    assert f == local and f.to_bytes() == local.to_bytes()  # counters, key count, header: everything
    assert f.counters("hot") == local.counters("hot") and set(f.counters("hot")) == {15}
    assert f.count("warm") >= 9 and f.saturated_count == local.saturated_count >= 7
    wide = build(bag, 3_100, 0.01, counting=True, layout="partitioned", counter_bits=8, seed=3, scheduler="sync")
    local_wide = CountingBloomFilter(3_100, 0.01, layout="partitioned", counter_bits=8, seed=3)
    local_wide.update(keys)
    assert wide.to_bytes() == local_wide.to_bytes() and wide.count("hot") >= 40 and wide.saturated_count == 0
    with pytest.warns(CapacityWarning, match="sized for 3,000 keys now holds 3,049"):
        build(bag, 3_000, 0.01, counting=True, scheduler="sync")
    with pytest.raises(ValueError, match="no counting variant"):
        build(bag, 10, 0.01, counting=True, layout="blocked")


def _pair_bytes(pair):
    return f"{pair[0]}|{pair[1]}".encode()


def test_key_function_is_used_on_every_partition():
    pairs = [(i, f"v{i % 17}") for i in range(2_000)]
    f = build(db.from_sequence(pairs, npartitions=5), 2_000, 0.01, key=_pair_bytes, scheduler="threads")
    local = BloomFilter(2_000, 0.01, key=_pair_bytes)
    local.update(pairs)
    assert f == local and (3, "v3") in f


def test_delayed_result_and_empty_collections():
    bag = db.from_sequence(KEYS[:500], npartitions=4)
    delayed = build(bag, 500, 0.01, compute=False)
    assert hasattr(delayed, "compute")
    assert delayed.compute(scheduler="sync") == _local(KEYS[:500], 500, 0.01)
    empty = build(db.from_sequence([], npartitions=1), 100, 0.01, scheduler="sync")
    assert empty == BloomFilter(100, 0.01) and empty.fill_ratio == 0


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="Dask Bag, Series"):
        build(["a", "b"], 10, 0.01)
    with pytest.raises(ValueError, match="split_every"):
        build(db.from_sequence(["a"]), 10, 0.01, split_every=1)
    with pytest.raises(ValueError, match="capacity"):
        build(db.from_sequence(["a"]), 0, 0.01)
    with pytest.raises(TypeError, match="cannot hash"):
        build(db.from_sequence(["a", 1.5, None]), 10, 0.01, scheduler="sync")


@settings(max_examples=40)
@given(st.lists(st.one_of(st.text(max_size=12), st.integers(-2**70, 2**70), st.binary(max_size=12)), max_size=200),
       st.integers(1, 9), st.integers(2, 5), st.booleans())
def test_any_keys_any_partitioning_same_filter(keys, npartitions, split_every, counting):
    bag = db.from_sequence(keys, npartitions=npartitions) if keys else db.from_sequence([], npartitions=1)
    f = build(bag, 200, 0.05, counting=counting, split_every=split_every, scheduler="sync")
    local = CountingBloomFilter(200, 0.05) if counting else BloomFilter(200, 0.05)
    local.update(keys)
    assert f == local


@pytest.mark.slow
@pytest.mark.parametrize("processes", [False, True])
def test_distributed_local_cluster(processes):
    """A real distributed cluster (threads in this process, or one worker process that receives the partitions
    and sends back the partial filters' payloads): the same bits as the local build."""
    distributed = pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    keys = np.arange(200_000, dtype=np.uint64) * np.uint64(2654435761)
    with local_cluster(n_workers=1 if processes else 2, processes=processes, dashboard_address=None,
                       silence_logs=50) as cluster, distributed.Client(cluster, timeout="60s") as client:
        array = da.from_array(keys, chunks=20_000)
        f = build(array, len(keys), 0.01, split_every=4)
        counting = build(array, len(keys), 0.01, counting=True)
        assert client.status == "running"
    assert f == _local(keys, len(keys), 0.01)
    local_counting = CountingBloomFilter(len(keys), 0.01)
    local_counting.update(keys)
    assert counting.to_bytes() == local_counting.to_bytes()


@pytest.mark.slow
def test_quick_benchmark_runs(tmp_path):
    """The benchmark's CI-sized run: every build mode runs, and every Dask-built filter has the local bits."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "dask_build.py"), "--quick",
                          "--keys", "20k", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    rows = json.loads(raw.read_text())["rows"]
    assert len(rows) == 9 and all(r["identical"] for r in rows)
    assert "| numpy-u64 | dask distributed" in run.stdout
