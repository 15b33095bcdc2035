"""Build a filter from a Dask collection: one partial filter per partition, merged in a tree (extra ``dask``).

Every partition is turned into a filter of the same geometry by one compiled batch ``update``; the partial
filters are then merged ``split_every`` at a time, level after level, until one is left. A Bloom filter's bits
are a function of the *set* of keys (bit p is set iff some key probes p), so the OR of the partial filters is
bit for bit the filter one process builds from all the keys. A counting filter merges by adding counters,
saturating at ``counter_max``: with ``c_i`` the occurrences counted by partition i,
``min(min(c_1, M) + min(c_2, M), M) = min(c_1 + c_2, M)``, so the merged counters, sticky saturation included,
equal those of one process inserting every key (Fan, Cao, Almeida and Broder, *Summary Cache*: counters of
4 bits that stick at 15).

The geometry (m, k) is computed once, here, and sent to the workers as integers, so every partial filter has the
same positions on any machine. Partial filters travel as their raw payload (a numpy byte array, which Dask's
serialisation ships without copying into pickles) and the number of keys they counted.

>>> import dask.bag as db
>>> from bloomwise.dask import build
>>> keys = db.from_sequence([f"user{i}" for i in range(1000)], npartitions=4)
>>> f = build(keys, 1000, 0.01, scheduler="sync")
>>> "user7" in f, "user1000" in f
(True, False)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from bloomwise import theory
from bloomwise._base import COUNTING_LAYOUTS, LAYOUTS, check_capacity, layout_id
from bloomwise._storage import StorageGeometry
from bloomwise.bloom import BloomFilter
from bloomwise.counting import CountingBloomFilter

__all__ = ["build", "local_cluster"]


def _require_dask():
    try:
        import dask
    except ImportError as exc:  # pragma: no cover - the extra is part of the test environment
        raise ImportError("bloomwise.dask needs Dask: pip install 'bloomwise[dask]'") from exc
    return dask


class _Partial(NamedTuple):
    """A partial filter in transit: its payload (numpy uint8, the filter's bits or packed counters) and count."""

    payload: Any
    num_keys: int


@dataclass(frozen=True)
class _Recipe:
    """Everything a worker needs to build a filter with exactly the positions of the final one: the storage
    geometry (``bloomwise._storage``) and the key function."""

    geometry: StorageGeometry
    key: Optional[Callable[[object], bytes]]

    @property
    def structure(self) -> type:
        return CountingBloomFilter if self.geometry.structure == "counting" else BloomFilter

    def empty(self, num_keys: int = 0):
        """A new, empty filter of this geometry (``num_keys`` as its count of keys)."""
        return self.structure.from_payload(self.geometry, num_keys=num_keys, key=self.key)

    def load(self, partial: _Partial):
        """The filter a partial describes (its payload copied in)."""
        return self.structure.from_payload(self.geometry, partial.payload, num_keys=partial.num_keys, key=self.key)


def _as_partial(f) -> _Partial:
    import numpy as np  # numpy comes with Dask: the module itself imports without either
    # frombuffer over the filter's payload view keeps the filter's storage alive: no copy here.
    return _Partial(np.frombuffer(f.payload_view(), dtype=np.uint8), f.keys_counted)


def _partition_keys(part, column):
    """A partition (list of a Bag, pandas Series or DataFrame, numpy block) -> keys for one batch ``update``."""
    if column is not None:
        if not hasattr(part, "columns"):
            raise TypeError(f"column={column!r} applies to a DataFrame, got partitions of {type(part).__name__}")
        part = part[column]
    elif hasattr(part, "columns"):
        raise ValueError(f"a DataFrame partition has columns {list(part.columns)!r}: pass column= (one of them), "
                         "or build from one column, df[name]")
    if hasattr(part, "to_numpy") and not hasattr(part, "__array_interface__"):  # pandas Series / Index
        if getattr(part.dtype, "kind", "O") in "iu":
            return part.to_numpy()  # int64/uint64 (nullable ints too, when nothing is missing): hashed without the GIL
        return part.tolist()  # strings (Arrow-backed or not) and the rest: a list is the fastest batch of objects
    if hasattr(part, "__array_interface__"):
        return part.reshape(-1)
    return part if isinstance(part, (list, tuple)) else list(part)


def _build_partition(recipe: _Recipe, column, part) -> _Partial:
    f = recipe.empty()
    try:
        f.update(_partition_keys(part, column))
    except TypeError as exc:
        raise TypeError(f"a partition holds keys the filter cannot hash ({exc}); keys are str, bytes or int "
                        "(drop missing values first, e.g. .dropna(), or pass key=)") from exc
    return _as_partial(f)


def _merge(recipe: _Recipe, *partials: _Partial) -> _Partial:
    """One tree node: the OR (Bloom) or saturating counter sum (counting) of several partials."""
    first = partials[0]
    if recipe.geometry.structure == "bloom":  # `|=` leaves a Bloom filter's count alone: the node's count is the partitions' sum
        first = _Partial(first.payload, sum(p.num_keys for p in partials))
    merged = recipe.load(first)
    for partial in partials[1:]:
        merged |= recipe.load(partial)  # a counting filter's `|=` adds the counts itself
    return _as_partial(merged)


def _finish(recipe: _Recipe, capacity: int, fpr: float, partial: Optional[_Partial]):
    """The final filter, sized for ``capacity`` at ``fpr`` (its CapacityWarning limit), from the root of the merge
    tree."""
    f = recipe.empty() if partial is None else recipe.load(partial)
    f.set_target(capacity, fpr)  # the CapacityWarning a local build would have given, if over
    return f


def _blocks(collection, column):
    """The collection's partitions as a flat list of Delayed objects; TypeError for anything else."""
    if hasattr(collection, "to_delayed") and (hasattr(collection, "npartitions") or hasattr(collection, "chunks")):
        blocks = collection.to_delayed()
        if hasattr(blocks, "ravel"):  # dask.array: an ndarray of blocks
            if getattr(collection, "ndim", 1) != 1:
                raise ValueError(f"a Dask array of keys must be one-dimensional, got {collection.ndim} dimensions")
            blocks = list(blocks.ravel())
        return list(blocks)
    raise TypeError(f"collection must be a Dask Bag, Series, DataFrame (with column=) or 1-d Array, got "
                    f"{type(collection).__module__}.{type(collection).__name__}")


def build(collection, capacity, fpr=0.01, *, counting=False, layout=None, seed=0, hash_scheme="xxh3",
          counter_bits=4, column=None, key=None, split_every=8, compute=True, **compute_kwargs):
    """A BloomFilter (or, ``counting=True``, a CountingBloomFilter) of every key in a Dask collection.

    The result equals ``BloomFilter(capacity, fpr, layout=..., seed=...)`` after ``update`` with all the keys
    (bit for bit; a counting filter counter for counter, its key count too). A Bloom filter's count of keys
    added is the sum of the partitions' counts: keys present in several partitions count once in each.

    :param collection: a ``dask.bag.Bag``, a ``dask.dataframe.Series``, a ``dask.dataframe.DataFrame`` with
        ``column=``, or a 1-d ``dask.array.Array``. Keys are what the filters take: str, bytes, int (numpy
        integer columns hash by value); missing values raise TypeError (drop them first).
    :param capacity: the number of distinct keys the filter is sized for (an int >= 1).
    :param fpr: the target false-positive rate at capacity.
    :param counting: build a CountingBloomFilter (counters merged by saturating addition).
    :param layout: ``"blocked"`` (Bloom default), ``"classic"`` (counting default) or ``"partitioned"``.
    :param seed: hash seed; ``hash_scheme``: ``"xxh3"`` (default) or ``"xxh64"``; ``counter_bits``: 4, 8, 16.
    :param column: the column of a DataFrame to take keys from.
    :param key: optional function turning keys into bytes (it must pickle to reach other processes).
    :param split_every: how many partial filters one merge task combines (the tree's fan-in, >= 2).
    :param compute: ``False`` returns a ``dask.delayed`` object of the filter instead of computing it.
    :param compute_kwargs: passed to ``dask.compute`` (``scheduler=``, ...); a ``distributed.Client`` in
        effect is used by default.
    """
    dask = _require_dask()
    capacity = check_capacity(capacity)
    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 2:
        raise ValueError(f"split_every must be an int >= 2, got {split_every!r}")
    if layout is None:
        layout = "classic" if counting else "blocked"
    layout_id(layout, COUNTING_LAYOUTS if counting else LAYOUTS)
    # Sized exactly as the local classes size themselves; checks seed/scheme/counter_bits by building one.
    num_cells, num_hashes = theory.optimal_size(capacity, fpr, layout=layout)
    cell_options = (("counter_bits", counter_bits),) if counting else ()
    recipe = _Recipe(StorageGeometry("counting" if counting else "bloom", layout, num_cells, num_hashes, seed,
                                     hash_scheme, cell_options), key)
    recipe.empty()
    if column is not None and hasattr(collection, "columns"):
        if column not in collection.columns:
            raise KeyError(f"the DataFrame has no column {column!r}; its columns: {list(collection.columns)!r}")
        collection, column = collection[column], None  # Dask then reads only that column (projection)
    blocks = _blocks(collection, column)

    delayed = dask.delayed
    level = [delayed(_build_partition, pure=True)(recipe, column, block) for block in blocks]
    while len(level) > 1:
        level = [delayed(_merge, pure=True)(recipe, *level[i:i + split_every])
                 for i in range(0, len(level), split_every)]
    root = level[0] if level else None
    if not compute:
        return delayed(_finish, pure=True)(recipe, capacity, fpr, root)
    if root is None:
        return _finish(recipe, capacity, fpr, None)
    (partial,) = dask.compute(root, **compute_kwargs)
    return _finish(recipe, capacity, fpr, partial)


def local_cluster(n_workers=2, *, threads_per_worker=1, processes=True, **kwargs):
    """A ``distributed.LocalCluster`` set up for numpy-heavy filter builds.

    The nanny's default environment sets ``MALLOC_TRIM_THRESHOLD_=65536``, which makes the large numpy buffers
    of partial filters page-fault heavily; this cluster's workers start without it. Scripts that start a
    cluster with worker processes must do so under ``if __name__ == "__main__":`` (the workers re-import the
    main module). Use ``with local_cluster() as cluster, distributed.Client(cluster): build(...)``.
    """
    dask = _require_dask()
    from distributed import LocalCluster
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {}}):
        return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes,
                            **kwargs)
