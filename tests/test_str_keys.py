"""str keys beyond ASCII: hashed as their UTF-8 bytes (the same hash as s.encode()), encoded into a buffer of the
call, so nothing is left behind in the caller's str objects (no cached UTF-8 copy)."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

import bloomwise
from bloomwise._native.hashes import hash_many, key_hash

REFERENCE = {1: xxhash.xxh64_intdigest, 2: xxhash.xxh3_64_intdigest}

# one string of each storage kind (UCS1 with Latin-1 letters, UCS2, UCS4), short and past the stack buffer (512 bytes)
SAMPLES = [
    "", "é", "https://exämple.org/a", "ÿ" * 300, "a" * 7 + "é" + "b" * 9, "Ω", "日本語のキー", "€" * 200,
    "😀", "a😀b" * 150, "\x80", "\u07ff\u0800\uffff", "\U0010ffff", "x" * 1000 + "é",
]


class StrSubclass(str):
    pass


@pytest.mark.parametrize("scheme", [1, 2])
def test_samples_hash_as_their_utf8(scheme):
    for s in SAMPLES:
        for seed in (0, 12345):
            want = REFERENCE[scheme](s.encode(), seed)
            assert key_hash(s, seed, scheme) == want, s
            assert key_hash(StrSubclass(s), seed, scheme) == want, s


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=400), st.integers(0, 2**64 - 1))
def test_any_text_hashes_as_its_utf8(text, seed):
    assert key_hash(text, seed) == xxhash.xxh3_64_intdigest(text.encode(), seed)
    assert key_hash(text, seed, 1) == xxhash.xxh64_intdigest(text.encode(), seed)


def test_a_lone_surrogate_is_refused_naming_the_key_and_what_to_do():
    for s, position in (("\ud800", 0), ("ab\udfffcd" * 100, 2)):
        refusal = (rf"key {re.escape(repr(s[:40]))}(\.\.\.)? cannot be hashed: its character '\\ud[8-f][0-9a-f]{{2}}' at "
                   rf"position {position} is a lone surrogate, which UTF-8 cannot encode; pass the key as bytes "
                   rf"instead, e.g. key.encode\('utf-8', 'surrogatepass'\)$")
        with pytest.raises(ValueError, match=refusal) as error:
            key_hash(s)
        assert not isinstance(error.value, UnicodeError)  # not the codec's own error
        f = bloomwise.BloomFilter(100, 0.01)
        for call in (lambda: f.add(s), lambda: f.update(["ok", s]), lambda: s in f, lambda: f.contains_many([s])):
            with pytest.raises(ValueError, match=refusal):
                call()
        # what the message says to do works: the key's bytes with surrogatepass are a key like any other
        f.add(s.encode("utf-8", "surrogatepass"))
        assert s.encode("utf-8", "surrogatepass") in f
    f = bloomwise.BloomFilter(100, 0.01)
    with pytest.raises(ValueError, match=r"key 1 of the array cannot be hashed: it holds a lone surrogate .*"
                                         r"surrogatepass"):
        f.update(np.array(["fine", "bad\ud800"]))


def test_every_element_of_a_numpy_array_of_any_shape_is_one_key():
    """Documented (README, docs/architecture.md): a 2-D 'S' or 'U' array is a batch of its elements, not of its
    rows, and the answers keep the array's shape."""
    for grid in (np.array([["ab", "cd", "ef"], ["gh", "ij", "kl"]]), np.array([[b"ab", b"cd"], [b"ef", b"gh"]])):
        f = bloomwise.BloomFilter(1000, 0.001, seed=4)
        f.update(grid)
        assert f.num_keys == grid.size
        reference = bloomwise.BloomFilter(1000, 0.001, seed=4)
        reference.update(grid.ravel().tolist())
        assert f == reference
        answers = f.contains_many(grid)
        assert answers.shape == grid.shape and answers.all()
        rows = ["".join(map(str, row)) if grid.dtype.kind == "U" else b"".join(row) for row in grid]
        assert not f.contains_many(rows).any()  # rows were never keys


def test_filters_leave_nothing_in_the_callers_strings():
    # CPython caches a str's UTF-8 copy inside it (PyUnicode_AsUTF8), and sys.getsizeof counts that copy
    keys = [f"https://exämple.org/päge/{i}" for i in range(2000)] + ["日本" * 5, "😀" * 300]
    sizes = [sys.getsizeof(k) for k in keys]
    f = bloomwise.BloomFilter(5000, 0.01)
    c = bloomwise.CountingBloomFilter(5000, 0.01)
    for k in keys[:500]:
        f.add(k)
        c.add(k)
    f.update(keys)
    c.update(keys)
    assert all(k in f for k in keys) and all(k in c for k in keys)
    assert f.contains_many(keys).all() and c.contains_many(keys).all()
    assert [sys.getsizeof(k) for k in keys] == sizes
    # the same keys from a numpy U array and as bytes: the same filter bits
    g = bloomwise.BloomFilter(5000, 0.01)
    g.update(np.array(keys))
    h = bloomwise.BloomFilter(5000, 0.01)
    h.update([k.encode() for k in keys])
    assert g == f and g.to_bytes() == h.to_bytes()  # f also counted the 500 repeated add() calls


@given(st.text(st.sampled_from("abc/.é\x80ÿ") | st.characters(max_codepoint=255), max_size=70),
       st.integers(0, 2**64 - 1))
def test_latin1_text_hashes_as_its_utf8(text, seed):
    """One-byte (UCS1) strings: the eight-at-a-time encoder, its tail store and Latin-1 letters anywhere."""
    assert key_hash(text, seed) == xxhash.xxh3_64_intdigest(text.encode(), seed)


# The single-key and batch paths (add, `in`, update, hash_many) hash an exact UCS1 str of up to 256 characters on
# their own (hash_common_str: ASCII in place, Latin-1 letters through the sixteen-at-a-time encoder); key_hash goes
# through hash_key. Mostly-ASCII text with Latin-1 letters anywhere, of every length across the 8- and 16-character
# steps and the 256-character limit, and text of every storage kind.
ASCII_RUN = st.text(st.characters(max_codepoint=127), max_size=60)
LATIN1_TEXT = st.builds(lambda head, parts, tail: head + "".join(run + letter for run, letter in parts) + tail,
                        st.sampled_from(["", "h" * 240]),  # (and past the 256 characters)
                        st.lists(st.tuples(ASCII_RUN, st.sampled_from("é\x80ÿ") | st.characters(min_codepoint=128,
                                                                                           max_codepoint=255)),
                                 max_size=7),
                        ASCII_RUN)
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=600)
@given(LATIN1_TEXT | ANY_TEXT, st.integers(0, 2**64 - 1), st.sampled_from(["xxh64", "xxh3"]))
def test_every_path_hashes_str_as_its_utf8(text, seed, scheme_name):
    scheme = {"xxh64": 1, "xxh3": 2}[scheme_name]
    want = REFERENCE[scheme](text.encode(), seed)
    assert key_hash(text, seed, scheme) == want
    assert int(hash_many([text, "x" + text], seed, scheme=scheme)[0]) == want
    f = bloomwise.BloomFilter(64, 0.01, seed=seed, hash_scheme=scheme_name)
    f.add(text)
    g = bloomwise.BloomFilter(64, 0.01, seed=seed, hash_scheme=scheme_name)
    g.update([text])
    h = bloomwise.BloomFilter(64, 0.01, seed=seed, hash_scheme=scheme_name)
    h.add(text.encode())
    assert f.to_bytes() == g.to_bytes() == h.to_bytes()
    assert text in h and text.encode() in f


@given(st.text(st.sampled_from("a\xe9\ud800\udfff\u65e5") | st.characters(blacklist_categories=()), min_size=1,
               max_size=40))
def test_surrogates_are_refused_on_every_path_where_str_encode_refuses_them(text):
    try:
        text.encode()
    except UnicodeEncodeError:
        refused = True
    else:
        refused = False
    f = bloomwise.BloomFilter(64, 0.01)
    for call in (lambda: key_hash(text), lambda: hash_many([text]), lambda: f.add(text), lambda: text in f,
                 lambda: f.update([text])):
        if refused:
            with pytest.raises(ValueError, match="lone surrogate"):
                call()
        else:
            call()
