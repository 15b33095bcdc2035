"""`bloomwise plan` and the command-line number readers (bloomwise.cli._parse)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, strategies as st

from bloomwise import BloomFilter, theory
from bloomwise.cli import main
from bloomwise.cli._parse import parse_count, parse_positive_int, parse_probability, parse_size_bits
from command_support import run_command


# ---------------------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("1000000", 10 ** 6), ("1e6", 10 ** 6), ("1E6", 10 ** 6), ("1_000_000", 10 ** 6), ("1,000,000", 10 ** 6),
    ("2.5e6", 2_500_000), ("40M", 40_000_000), ("2.5k", 2500), ("10K", 10_000), ("3G", 3 * 10 ** 9),
    ("1T", 10 ** 12), (" 7 ", 7), ("0", 0), ("1e30", 10 ** 30), ("4.0", 4),
])
def test_parse_count(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text, message", [
    ("1.5", "not a whole number"), ("1e-3", "not a whole number"), ("2.0005k", "not a whole number"),
    ("-3", "negative"), ("ten", "not a number"), ("", "not a number"), ("5 m", "not a number"),
    ("1e6x", "not a number"), ("nan", "not a number"), ("inf", "not a number"),
])
def test_parse_count_rejects(text, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_count(text, "--n")
    assert f"--n {text!r}" in str(error.value)


@pytest.mark.parametrize("text, bits", [
    ("1000", 1000), ("1e6", 10 ** 6), ("512b", 512), ("512 bits", 512), ("1 bit", 1), ("2 bytes", 16),
    ("3B", 24), ("64KiB", 64 * 1024 * 8), ("64kib", 64 * 1024), ("1Mib", 2 ** 20), ("1MiB", 2 ** 23),
    ("2GiB", 2 * 2 ** 33), ("1TiB", 2 ** 43), ("8MB", 64_000_000), ("8mb", 8_000_000), ("1.5 KB", 12_000),
    ("10kb", 10_000), ("1kB", 8000), ("0.5KiB", 4096), ("1_024b", 1024),
])
def test_parse_size_bits(text, bits):
    assert parse_size_bits(text) == bits


@pytest.mark.parametrize("text, message", [
    ("64KiX", "not a size"), ("64Ki", "needs a unit"), ("10k", "needs a unit"), ("0.1b", "not a whole number of bits"),
    ("1.3B", "not a whole number of bits"), ("-5b", "negative"), ("big", "not a size"), ("5 furlongs", "not a size"),
])
def test_parse_size_rejects(text, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_size_bits(text, "--m")
    assert f"--m {text!r}" in str(error.value)


@pytest.mark.parametrize("text, value", [
    ("0.01", 0.01), ("1e-6", 1e-6), ("1%", 0.01), ("0.5 %", 0.005), ("1 in 10000", 1e-4), ("1 IN 100", 0.01),
    ("1/1000", 1e-3), ("1:1e6", 1e-6), ("1 in 1,000,000", 1e-6), (".5", 0.5), ("99.9%", 0.999),
])
def test_parse_probability(text, value):
    assert parse_probability(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text, message", [
    ("0", "strictly between 0 and 1"), ("1", "strictly between 0 and 1"), ("100%", "strictly between"),
    ("150%", "strictly between"), ("-0.1", "strictly between"), ("nan", "strictly between"),
    ("1 in 1", "above 1"), ("1 in 0.5", "above 1"), ("2 in 10", "not a probability"), ("often", "not a probability"),
    ("", "not a probability"),
])
def test_parse_probability_rejects(text, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_probability(text, "--p")
    assert f"--p {text!r}" in str(error.value)


def test_parse_positive_int():
    assert parse_positive_int("12") == 12
    with pytest.raises(ValueError, match="at least 1"):
        parse_positive_int("0", "--k")


@given(st.integers(0, 10 ** 18))
def test_counts_and_sizes_round_trip(value):
    assert parse_count(str(value)) == value
    assert parse_count(f"{value:,}") == value
    assert parse_size_bits(f"{value}b") == value
    assert parse_size_bits(f"{value}B") == 8 * value


@given(st.floats(1e-300, 0.999999, allow_nan=False))
def test_probabilities_round_trip(value):
    assert parse_probability(repr(value)) == value
    assert parse_probability(f"1 in {1 / value!r}") == pytest.approx(value, rel=1e-15)


# ---------------------------------------------------------------------------------------------------------
# bloomwise plan
# ---------------------------------------------------------------------------------------------------------
def run(capsys, *argv):
    return run_command(capsys, "plan", *argv)


def test_plan_n_p(capsys):
    code, out, err = run(capsys, "--n", "1e6", "--p", "1%", "--layout", "classic")
    assert code == 0 and err == ""
    expected = theory.plan(n=10 ** 6, p=0.01)
    assert f"{expected.m:,}" in out and "9,592,956" in out
    assert "k  hashes               7 (solved)" in out
    assert "bits per key            9.593" in out
    assert "log2(1/p) = 6.644" in out and "1.444x" in out
    for layout in theory.LAYOUTS:
        assert layout in out
    assert "m rounded up to 9,593,344 bits" in out  # the blocked layout's size


def test_plan_default_is_the_filter_build_makes(capsys, tmp_path):
    """The first plan line a new user sees is the filter `bloomwise build` and BloomFilter(n, p) make: the blocked
    layout's m and k, and the blocked line shows that filter's own rate (not the rate at the classic size)."""
    code, out, err = run(capsys, "--n", "1e6", "--p", "1%")
    assert code == 0 and err == ""
    default = BloomFilter(10 ** 6, 0.01)
    assert out.splitlines()[0] == "bloomwise plan (blocked layout)"
    assert f"m  bits                 {default.num_cells:,} = " in out and "10,099,712" in out
    assert f"k  hashes               {default.num_hashes} (solved)" in out and default.num_hashes == 8
    blocked_line = next(line for line in out.splitlines() if "blocked   " in line)
    assert blocked_line.strip().startswith("* blocked") and "0.009998" in blocked_line, blocked_line
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    assert main(["build", str(keys), "-o", str(tmp_path / "f.bloom"), "--capacity", "1e6", "--fpr", "1%"]) == 0
    assert f"{default.num_cells:,} bits" in capsys.readouterr().out


def test_plan_examples(capsys):
    code, out, _ = run(capsys, "--n", "40M", "--p", "1e-6", "--layout", "classic")
    assert code == 0 and "1,150,211,148" in out and " 20 (solved)" in out
    assert "k > 16" in out  # no blocked filter with 20 hashes
    code, out, _ = run(capsys, "--n", "10000", "--p", "1 in 1000", "--layout", "classic")
    assert code == 0 and "143,777" in out and "17,973 bytes" in out


def test_plan_m_p(capsys):
    code, out, err = run(capsys, "--m", "64KiB", "--p", "1 in 10000", "--layout", "classic")
    assert code == 0, err
    expected = theory.plan(m=524_288, p=1e-4)
    assert f"{expected.n:,} (solved)" in out and "524,288" in out and "64.00 KiB" in out


def test_plan_with_k_layout_and_json(capsys):
    code, out, _ = run(capsys, "--n", "1e5", "--p", "0.01", "--k", "10", "--layout", "blocked", "--json")
    assert code == 0
    data = json.loads(out)
    expected = theory.plan(n=10 ** 5, p=0.01, k=10, layout="blocked")
    assert data["m"] == expected.m and data["k"] == 10 and data["layout"] == "blocked"
    assert data["fpr"]["blocked"] <= 0.01 and data["m"] % 512 == 0
    assert data["solved"] == ["m"]
    assert data["information_limit_bits_per_key"] == pytest.approx(math.log2(100))


def test_plan_rate_from_n_m_k(capsys):
    code, out, _ = run(capsys, "-n", "1000", "-m", "10000", "-k", "7", "--layout", "classic")
    assert code == 0 and "0.008196" in out and "(solved)" in out


def test_plan_table(capsys):
    code, out, _ = run(capsys, "--table")
    assert code == 0
    assert "Table 3" in out and "Table 4" in out and "Table 5" in out
    assert "Differences with the printed tables" in out and ": 4" in out
    assert "printed 8.39e-06, formula 8.39e-07" in out
    assert "printed 7.26e-06, formula 7.26e-07" in out
    assert "printed 0.092, formula 0.0918" in out
    assert "printed 3.46, formula 3.47" in out


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plan_figure(capsys, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    path = tmp_path / f"figure4{suffix}"
    code, out, err = run(capsys, "--figure", str(path))
    assert code == 0, err
    assert path.stat().st_size > 1000 and str(path) in out
    header = path.read_bytes()[:64]
    assert header.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in path.read_bytes()[:2000]


def test_plot_module_rejects_other_formats(tmp_path):
    from bloomwise.plot import plot_figure4

    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_figure4(tmp_path / "figure.pdf")


def test_plan_figure_without_matplotlib(capsys, tmp_path, monkeypatch):
    import bloomwise.plot

    def missing():
        raise ImportError("drawing figures needs matplotlib: pip install 'bloomwise[plot]'")

    monkeypatch.setattr(bloomwise.plot, "_matplotlib_figure", missing)
    code, _, err = run(capsys, "--figure", str(tmp_path / "f.png"))
    assert code == 1 and "bloomwise[plot]" in err


@pytest.mark.parametrize("argv, message", [
    (["--n", "ten", "--p", "1%"], "--n 'ten' is not a number"),
    (["--n", "1.5", "--p", "1%"], "--n '1.5' is not a whole number"),
    (["--n", "1e6", "--p", "150%"], "--p '150%' must be strictly between 0 and 1"),
    (["--n", "1e6", "--p", "0"], "--p '0' must be strictly between 0 and 1"),
    (["--m", "64KiX", "--p", "1%"], "--m '64KiX' is not a size"),
    (["--m", "64Ki", "--p", "1%"], "needs a unit"),
    (["--n", "1e6", "--p", "1%", "--k", "0"], "--k '0' must be at least 1"),
    (["--n", "0", "--p", "1%"], "--n '0'"),
    (["--m", "0b", "--p", "1%"], "--m: a filter needs at least one bit"),
    (["--n", "1e6"], "--n (keys) is not enough: also give --p (false-positive rate) or --m (bits)"),
    (["--p", "1%", "--k", "3"], "fix the bits per key but not the size"),
    ([], "give two of --n, --p, --m"),
    (["--n", "1000", "--m", "1000", "--p", "1e-6", "--layout", "classic"], "inconsistent"),
    (["--m", "3", "--p", "1e-9", "--layout", "classic"], "cannot hold even one key"),
    (["--n", "1e6", "--p", "1%", "--layout", "bloom"], "--layout 'bloom' is not one of classic, partitioned, blocked"),
    (["--n", "10", "--m", "1000", "--layout", "blocked"], "multiple of 512"),
    (["--n", "10", "--m", "1000"], "multiple of 512"),  # blocked by default, as bloomwise build
    (["--n", "10", "--p", "1%", "--k", "20", "--layout", "blocked"], "between 1 and 16"),
])
def test_plan_bad_input_exits_2_naming_the_value(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err and err.startswith("bloomwise plan: ") and "error:" not in err and err.count("\n") == 1
