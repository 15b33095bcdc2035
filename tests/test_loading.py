"""`bloomwise.load(path)` reads whichever structure a file holds; `bloomwise info` and `query` take every structure."""
from __future__ import annotations

import numpy as np
import pytest

import bloomwise
from bloomwise import (BloomFilter, CountingBloomFilter, FormatError, GeneralizedBloomFilter, RetouchedBloomFilter,
                       ScalableBloomFilter, VariableIncrementCountingBloomFilter)
from bloomwise.cache import DocumentCache, SummaryPublisher
from bloomwise.cli import main

STRUCTURES = [BloomFilter, CountingBloomFilter, VariableIncrementCountingBloomFilter, ScalableBloomFilter,
              GeneralizedBloomFilter, RetouchedBloomFilter]
MAPPABLE = {BloomFilter, CountingBloomFilter, VariableIncrementCountingBloomFilter}
KEYS = [f"key{i}" for i in range(300)]
PROBES = KEYS + [f"other{i}" for i in range(3000)]


def saved(cls, tmp_path):
    f = cls(400, 0.01, seed=7)
    f.update(KEYS)
    path = tmp_path / f"{cls.__name__}.bw"
    f.save(path)
    return f, path


def answers(f):
    return np.asarray(f.contains_many(PROBES), dtype=bool)


@pytest.mark.parametrize("cls", STRUCTURES)
@pytest.mark.parametrize("mmap", [False, True])
def test_load_returns_the_class_the_file_holds(tmp_path, cls, mmap):
    original, path = saved(cls, tmp_path)
    loaded = bloomwise.load(path, mmap=mmap)
    try:
        assert isinstance(loaded, cls)
        assert hasattr(loaded, "path") == (mmap and cls in MAPPABLE)
        assert loaded.to_bytes() == original.to_bytes()
        assert np.array_equal(answers(loaded), answers(original))
        assert answers(loaded)[:len(KEYS)].all() or cls in (GeneralizedBloomFilter, RetouchedBloomFilter)
    finally:
        if hasattr(loaded, "close"):
            loaded.close()


def test_a_summary_update_is_not_a_filter(tmp_path):
    cache = DocumentCache(64 * 8192, expected_entries=64)
    cache.put("http://a/", 100)
    path = tmp_path / "summary.bw"
    path.write_bytes(SummaryPublisher(cache).publish().to_bytes())
    with pytest.raises(FormatError, match=r"holds a cache summary update \(structure id 7\), not a filter: read it "
                                          r"with bloomwise.cache.summary.SummaryUpdate.from_bytes"):
        bloomwise.load(path)


def test_bad_files_name_what_is_wrong(tmp_path):
    original, path = saved(BloomFilter, tmp_path)
    data = bytearray(path.read_bytes())
    data[10] = 99  # the structure id
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="unknown structure id 99 .*1 \\(bloom\\).*upgrade bloomwise, or the file is "
                                          "corrupted"):
        bloomwise.load(path)
    data[10] = 2  # a counting filter's id on a Bloom filter's header: the header checksum no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="header checksum mismatch"):
        bloomwise.load(path)
    path.write_bytes(bytes(data[:30]))
    with pytest.raises(FormatError, match="truncated"):
        bloomwise.load(path)
    path.write_text("apple\nbanana\n")
    with pytest.raises(FormatError, match="not a bloomwise file"):
        bloomwise.load(path)
    path.write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        bloomwise.load(path)
    with pytest.raises(FileNotFoundError):
        bloomwise.load(tmp_path / "missing.bw")


@pytest.mark.parametrize("cls", STRUCTURES)
def test_cli_info_and_query_take_every_structure(tmp_path, capsys, cls):
    original, path = saved(cls, tmp_path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"structure       {cls.__name__}\n" in out and f"file            {path}\n" in out
    assert "keys added      300" in out
    assert main(["info", str(path), "--json"]) == 0
    info = __import__("json").loads(capsys.readouterr().out)
    assert info["structure"] == cls.__name__ and info["num_keys"] == 300 and info["seed"] == 7
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(PROBES) + "\n")
    assert main(["query", str(path), str(keys), "--count"]) == 0
    maybe = int(answers(original).sum())
    assert capsys.readouterr().out == f"{len(PROBES)} keys: {maybe} maybe present, {len(PROBES) - maybe} absent\n"


def test_cli_info_refuses_a_summary_update(tmp_path, capsys):
    cache = DocumentCache(64 * 8192, expected_entries=64)
    path = tmp_path / "summary.bw"
    path.write_bytes(SummaryPublisher(cache).publish().to_bytes())
    assert main(["info", str(path)]) == 1
    assert "holds a cache summary update" in capsys.readouterr().err


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("make", [lambda: bloomwise.BloomFilter(1000, 0.01),
                                  lambda: bloomwise.CountingBloomFilter(1000, 0.01)])
def test_a_loaded_filter_in_a_reference_cycle_is_collected_cleanly(tmp_path, make, mmap):
    # the filter's storage is a view of the bytes read (or mapped): the garbage collector must be able to clear it
    import gc
    import sys

    f = make()
    f.add("a")
    path = str(tmp_path / "f.bw")
    f.save(path)

    class Holder:
        pass

    errors = []
    old_hook, sys.unraisablehook = sys.unraisablehook, errors.append
    try:
        loaded = bloomwise.load(path, mmap=mmap)
        assert "a" in loaded
        holder = Holder()
        holder.me, holder.filter = holder, loaded
        del holder, loaded
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert not errors, [(e.exc_type, e.exc_value, e.object) for e in errors]


@pytest.mark.parametrize("cls", sorted(MAPPABLE, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_a_closed_structure_says_it_is_closed_and_its_file_stays_whole(tmp_path, cls):
    f, path = saved(cls, tmp_path)
    opened = cls.open(path, "r+")
    opened.add("late")
    opened.close()
    assert repr(opened) == f"<{cls.__name__} closed: {path}>"
    for use in (lambda: "key1" in opened, lambda: opened.add("x"), lambda: opened.contains_many(["key1"]),
                lambda: opened.update(["x"]), lambda: opened.copy(), lambda: opened.to_bytes(),
                # as the other operand too (its cells were unmapped: reading them would crash)
                lambda: opened == f, lambda: f == opened, lambda: f | opened, lambda: opened | f):
        with pytest.raises(RuntimeError, match=rf"^this {cls.__name__} is closed: close\(\) unmapped its file"):
            use()
    opened.close()  # a second close does nothing
    assert opened.num_cells == f.num_cells  # its parameters still answer
    again = cls.load(path)  # the close wrote the added key and its count
    assert "late" in again and again.num_keys == f.num_keys + 1
    assert (answers(again) | ~answers(f)).all()


@pytest.mark.parametrize("cls", sorted(MAPPABLE, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_a_structure_never_built_says_how_to_build_it(cls):
    empty = cls.__new__(cls)
    with pytest.raises(RuntimeError, match=rf"^this {cls.__name__} is not initialised: build it with its constructor"):
        "key" in empty  # noqa: B015


def test_public_class_names_the_class_a_user_knows(tmp_path):
    """A memory-mapped filter is an instance of a private subclass: `info` still names the public class."""
    from bloomwise._loading import public_class

    for cls in MAPPABLE:
        _, path = saved(cls, tmp_path)
        with cls.open(path) as mapped:
            assert type(mapped) is not cls and public_class(mapped) is cls
    assert public_class(ScalableBloomFilter(100)) is ScalableBloomFilter
    with pytest.raises(TypeError, match="dict is not one of bloomwise's filters"):
        public_class({})
