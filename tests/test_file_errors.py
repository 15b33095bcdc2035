"""Files whose checksums pass but whose structure is wrong: the same FormatError, naming the file, from every way of
reading them (load, open, from_bytes); and the hints for files that are not bloomwise files at all."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from bloomwise import BloomFilter, CountingBloomFilter, FormatError, ScalableBloomFilter
from bloomwise import VariableIncrementCountingBloomFilter as VICBF
from bloomwise import _format as fmt


def _valid_checksums(header, payload) -> bytes:
    """A file whose header and payload checksums are right for whatever the header and payload say."""
    return fmt.dumps(header, payload)


def _bloom_parts(num_bits=1000, **meta):
    bloom = BloomFilter(100, 0.01, layout="classic")
    bloom.update([f"k{i}" for i in range(50)])
    header = bloom._header()
    header = dataclasses.replace(header, meta={**header.meta, **meta})
    return header, bytearray(bloom._payload())


def _padding_set():
    bloom = BloomFilter.from_size(1000, 3, layout="classic")  # 1000 bits: the last word uses 40 of its 64 bits
    payload = bytearray(bloom._payload())
    payload[-1] |= 0x80
    return bloom._header(), payload


BAD_FILES = {
    "negative capacity": (lambda: _bloom_parts(capacity=-5), "meta capacity must be an int >= 1"),
    "capacity not an int": (lambda: _bloom_parts(capacity="ten"), "meta capacity must be an int >= 1"),
    "padding bits set": (_padding_set, "bits past num_bits"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_open_gives_the_format_error_that_load_gives(tmp_path, case):
    make, message = BAD_FILES[case]
    header, payload = make()
    path = tmp_path / "bad.bloom"
    path.write_bytes(_valid_checksums(header, payload))
    with pytest.raises(FormatError, match=message) as loaded:
        BloomFilter.load(path)
    for mode in ("r", "r+"):
        with pytest.raises(FormatError, match=message) as opened:
            BloomFilter.open(path, mode)
        assert str(opened.value) == str(loaded.value)
    with pytest.raises(FormatError, match=message):
        BloomFilter.from_bytes(path.read_bytes())
    # The failed open() released the file: it can be replaced and opened again.
    BloomFilter.from_size(1024, 3, layout="classic").save(path)
    with BloomFilter.open(path, "r+") as reopened:
        assert reopened.num_cells == 1024


@pytest.mark.parametrize("case", BAD_FILES)
def test_structure_errors_name_the_file(tmp_path, case):
    make, message = BAD_FILES[case]
    header, payload = make()
    path = tmp_path / "named.bloom"
    path.write_bytes(_valid_checksums(header, payload))
    for read in (BloomFilter.load, BloomFilter.open):
        with pytest.raises(FormatError) as info:
            read(path)
        assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def _counting_bad_bits():
    f = CountingBloomFilter.from_size(100, 3, counter_bits=8, layout="classic")
    return dataclasses.replace(f._header(), meta={"counter_bits": 5}), f.payload_view()


def _vicbf_bad_increments():
    f = VICBF.from_size(100, 3)
    return dataclasses.replace(f._header(), meta={**f._header().meta, "increments": [0]}), f.payload_view()


def _scalable_bad_stages():
    f = ScalableBloomFilter(100, 0.01)
    return dataclasses.replace(f._header(), meta={**f._header().meta, "num_bits": "many"}), f.payload_view()


@pytest.mark.parametrize("cls, make", [(CountingBloomFilter, _counting_bad_bits), (VICBF, _vicbf_bad_increments),
                                       (ScalableBloomFilter, _scalable_bad_stages)])
def test_every_structure_names_the_file(tmp_path, cls, make):
    header, payload = make()
    path = tmp_path / "structure.bin"
    path.write_bytes(_valid_checksums(header, payload))
    with pytest.raises(FormatError) as info:
        cls.load(path)
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_of_every_protocol_get_the_pickle_hint(tmp_path, protocol):
    path = tmp_path / "filter.pickle"
    path.write_bytes(pickle.dumps(BloomFilter.from_size(4096, 3, layout="classic"), protocol=protocol))
    with pytest.raises(FormatError, match="looks like a Python pickle: use pickle.load"):
        BloomFilter.load(path)
    with pytest.raises(FormatError, match="looks like a Python pickle"):
        fmt.loads(pickle.dumps({"a": 1}, protocol=protocol))


@pytest.mark.parametrize("make, cells, bits", [
    (lambda: CountingBloomFilter.from_size(100, 3, counter_bits=4, layout="classic"), "counters", 4),
    (lambda: VICBF.from_size(100, 3, layout="classic"), "positions", None),
])
def test_a_counting_payload_of_the_wrong_size_or_padding_is_refused_by_load_and_open(tmp_path, make, cells, bits):
    f = make()
    header, payload = f._header(), bytes(f.payload_view())
    bits = bits or header.meta["fixed_bits"] + header.meta["variable_bits"]
    expected = (100 * bits + 63) // 64 * 8
    short = dataclasses.replace(header, payload_length=expected - 8)
    with pytest.raises(FormatError, match=rf"payload holds {expected - 8} bytes; 100 {cells} of {bits} bits need "
                                          rf"{expected}"):
        type(f).from_bytes(fmt.dumps(short, payload[:-8]))
    padded = bytearray(payload)
    padded[-1] |= 0x80  # past the last cell (100 cells end before the last byte)
    path = tmp_path / "padded.bloom"
    path.write_bytes(_valid_checksums(header, bytes(padded)))
    for read in (lambda: type(f).load(path), lambda: type(f).open(path, "r"), lambda: type(f).open(path, "r+")):
        with pytest.raises(FormatError, match="the padding after the last counter is not zero"):
            read()
