"""bloomwise.units: the readers of counts, sizes and rates that the command line and the page share."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bloomwise.units import parse_size_bits, parse_size_bytes


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
