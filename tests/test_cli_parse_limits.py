"""The command-line number readers on absurd input: huge or tiny exponents, more digits than a float holds."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from bloomwise.cli import main
from bloomwise.cli._parse import parse_count, parse_size_bits, parse_size_bytes

READERS = [parse_count, parse_size_bits, parse_size_bytes]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("text", ["1e9999999", "1e41", "2.5e99999999999", "1e39M"])
def test_huge_numbers_are_a_clear_error(reader, text):
    with pytest.raises(ValueError, match="too large") as error:
        reader(text if reader is parse_count or not text.endswith("M") else text + "B", "--n")
    assert str(error.value).startswith(f"--n '{text}") and "is too large (at most 1e40)" in str(error.value)


@pytest.mark.parametrize("reader", READERS)
def test_tiny_and_long_numbers_are_not_whole(reader):
    for text in ["1e-9999999", "1.0000000000000000000000000000001", "7.00000000000000000000000000000000000001e3"]:
        with pytest.raises(ValueError, match="not a whole number"):
            reader(text, "--n")
    assert reader("0e-9999999") == 0
    if reader is parse_size_bytes:
        assert reader("1.25e39") == 125 * 10 ** 37  # the limit holds for the bits: 1e40 bits
    else:
        assert reader("1e40") == 10 ** 40


def test_size_in_bytes_errors_quote_what_was_typed():
    with pytest.raises(ValueError) as error:
        parse_size_bytes("-5", "--cache-size")
    assert str(error.value) == "--cache-size '-5' is negative"


def test_size_errors_give_examples_in_their_own_unit():
    with pytest.raises(ValueError) as error:
        parse_size_bytes("12x", "--cache-size")
    assert "examples: 65536 (bytes)" in str(error.value) and "(bits)" not in str(error.value)
    with pytest.raises(ValueError) as error:
        parse_size_bits("12x", "--m")
    assert "examples: 1000000 (bits)" in str(error.value)


@given(st.integers(0, 10 ** 40))
def test_every_count_up_to_the_limit_is_read_exactly(n):
    assert parse_count(str(n)) == n
    digits = str(n)
    assert parse_count(f"{digits[0]}.{digits[1:]}e{len(digits) - 1}") == n  # scientific notation, all digits kept


@pytest.mark.parametrize("argv", [["plan", "--n", "1e9999999", "--p", "1%"], ["simulate", "--synthetic", "1e9999999"],
                                  ["trace", "--synthetic", "1e9999999", "-o", "-"]])
def test_commands_reject_a_huge_count_as_a_usage_error(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "too large" in err and "Traceback" not in err
