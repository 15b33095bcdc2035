"""bloomwise.units: the readers of counts, sizes and rates that the command line and the page share."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bloomwise.units import (parse_fraction, parse_positive_size_bytes, parse_quantity, parse_real, parse_size_bits,
                             parse_size_bytes, parse_tolerance)


def test_the_page_reads_units_without_importing_the_command_line():
    code = ("import sys, bloomwise.web.inputs, bloomwise.web.calculator, bloomwise.web.explorer; "
            "print(sorted(name for name in sys.modules if name.startswith('bloomwise.cli')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("text", ["12b", "1.5b", "3 bits", "1x"])
def test_byte_options_show_byte_examples_for_every_error(text):
    with pytest.raises(ValueError) as error:
        parse_size_bytes(text, "--cache-size")
    message = str(error.value)
    assert message.startswith(f"--cache-size {text!r}") and "examples: 65536 (bytes)" in message, message
    assert "1000000 (bits)" not in message


def test_bit_sizes_that_are_not_whole_show_bit_examples():
    with pytest.raises(ValueError) as error:
        parse_size_bits("0.5b", "--m")
    assert "examples: 1000000 (bits)" in str(error.value)


@pytest.mark.parametrize("reader, text, message", [
    (lambda t: parse_real(t, "--peer-cost"), "0", "--peer-cost '0' must be a finite number > 0"),
    (lambda t: parse_real(t, "--peer-cost"), "inf", "--peer-cost 'inf' must be a finite number > 0"),
    (lambda t: parse_real(t, "--peer-cost"), "nan", "--peer-cost 'nan' must be a finite number > 0"),
    (lambda t: parse_real(t, "--zipf", allow_zero=True), "-1", "--zipf '-1' must be a finite number >= 0"),
    (lambda t: parse_real(t, "--zipf", allow_zero=True), "x", "--zipf 'x' is not a number"),
    (lambda t: parse_quantity(t, "--peer-timeout", "seconds"), "-1", "--peer-timeout '-1' must be a positive "
                                                                     "number of seconds"),
    (lambda t: parse_quantity(t, "--origin-cost", "milliseconds"), "ms", "--origin-cost 'ms' must be a positive "
                                                                        "number of milliseconds"),
    (lambda t: parse_tolerance(t, "--resize-tolerance"), "0", "--resize-tolerance '0' must be a fraction > 0"),
    (lambda t: parse_tolerance(t, "--resize-tolerance"), "of", "--resize-tolerance 'of' is not a fraction"),
    (lambda t: parse_fraction(t, "--shared", allow_zero=True), "-0.1", r"--shared '-0.1' must lie in \(0, 1\]"),
    (lambda t: parse_fraction(t, "--update-threshold"), "0", r"--update-threshold '0' must lie in \(0, 1\]"),
    (lambda t: parse_positive_size_bytes(t, "--cache-size"), "0", "--cache-size '0' must be at least 1 byte"),
])
def test_the_option_readers_name_the_option_and_the_text(reader, text, message):
    with pytest.raises(ValueError, match=message):
        reader(text)


def test_the_option_readers_accept_what_they_document():
    assert parse_real("0", "--zipf", allow_zero=True) == 0.0 and parse_real("2.5", "--peer-cost") == 2.5
    assert parse_quantity("0.25", "--peer-timeout", "seconds") == 0.25
    assert (parse_tolerance("off"), parse_tolerance("150%"), parse_tolerance(" 0.1 ")) == (None, 1.5, 0.1)
    assert (parse_fraction("0%", allow_zero=True), parse_fraction("30%", allow_zero=True)) == (0.0, 0.3)
    assert parse_positive_size_bytes("1") == 1 and parse_positive_size_bytes("1KiB") == 1024
