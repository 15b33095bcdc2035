"""`bloomwise reproduce --quick` runs end to end and checks its own rows; the fast table engine gives exactly the
counts of the library's reference simulation; verdict rules; the stand-in trace's hash."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bloomwise.cli import main
from bloomwise.paradox.simulation import Population, bloom_trial, counting_trial
from bloomwise.reproduce.paradox_tables import bloom_seed, counting_seed
from bloomwise.reproduce.rows import VERDICTS, rounds_to, verdict_for

pytest.importorskip("matplotlib")

FIGURES = ("summary_cache_fig4.png", "bloom_paradox_fig2a.png", "bloom_paradox_fig2b.png", "bloom_paradox_fig8.png",
           "bloom_paradox_fig9a.png", "bloom_paradox_fig9b.png", "bloom_paradox_fig9c.png")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    assert main(["reproduce", "--quick", "--quiet", "--out", str(out)]) == 0
    with open(out / "results.json", encoding="utf-8") as fh:
        return out, json.load(fh)


def test_quick_run_writes_report_results_and_every_figure(quick_run):
    out, doc = quick_run
    report = (out / "report.md").read_text(encoding="utf-8")
    for name in FIGURES:
        assert os.path.getsize(out / "figures" / name) > 5_000, name
        assert f"figures/{name}" in report
    assert doc["machine"]["cpu"] and doc["wall_time_s"] > 0
    assert doc["settings"]["quick"] is True
    assert "Open points, settled" in report


def test_every_row_is_well_formed_and_every_differs_row_says_why(quick_run):
    _, doc = quick_run
    rows = doc["rows"]
    assert len(rows) > 600
    for row in rows:
        assert set(row) == {"source", "item", "printed", "measured", "expected", "verdict", "note"}
        assert row["verdict"] in VERDICTS
        if row["verdict"] in ("differs", "misprint"):
            assert row["note"].strip(), row
    assert sum(doc["verdicts"].values()) == len(rows)


def _items(doc, text):
    return [r for r in doc["rows"] if text in r["item"]]


def test_every_printed_number_has_its_row(quick_run):
    _, doc = quick_run
    assert len(_items(doc, "Table II, alpha")) == 2 * 6 * 4 * 3  # two alphas, seven columns less the bpe/m ones
    assert len(_items(doc, "Table III, alpha = 5")) == 2 * 4 * 3
    cells = [r for r in doc["rows"] if r["item"].startswith("Table ") and ": (1 - e^(-k n/m))^k" in r["item"]]
    assert len(cells) == 411
    assert len(_items(doc, "k_opt = (m/n) ln 2")) == 31
    for text in ("Fig. 9(b)", "Fig. 9(c)", "Fig. 8", "product threshold", "Example 1", "Example 2", "Sec. VIII.A",
                 "Sec. VIII.B", "example m = 5", "m = 8n", "m = 10n"):
        assert _items(doc, text), text


def test_known_misprints_are_flagged(quick_run):
    _, doc = quick_run
    misprints = {r["item"] for r in doc["rows"] if r["verdict"] == "misprint"}
    assert "Table 4, m/n = 30, k = 15: (1 - e^(-k n/m))^k" in misprints
    assert "Table 4, m/n = 30, k = 16: (1 - e^(-k n/m))^k" in misprints
    assert any("28.7" in r["printed"] and r["verdict"] == "misprint" for r in doc["rows"])
    assert any("optimum (integral) number" in item for item in misprints)
    # and nothing else of the printed Summary Cache cells is called wrong
    cells = [r for r in doc["rows"] if ": (1 - e^(-k n/m))^k" in r["item"]]
    assert sum(r["verdict"] == "match" for r in cells) == 409


def test_the_fast_engine_gives_the_reference_simulation_counts():
    population = Population(members_per_type=4, exponents=(3, 4, 5, 6, 7))
    for bits in (4, 8):
        fast = bloom_seed(population, bits, (100, 5), 11, columns=("bf", "insert", "query", "both"))
        slow = bloom_trial(population, bits, (100, 5), 11)
        assert set(fast.outcomes) == set(slow)
        for key, outcome in slow.items():
            assert np.array_equal(fast.outcomes[key].false_positives, outcome.false_positives), key
            assert np.array_equal(fast.outcomes[key].false_negatives, outcome.false_negatives), key


def test_the_fast_counting_engine_gives_the_reference_counts():
    population = Population(members_per_type=4, exponents=(3, 4, 5, 6))
    fast = counting_seed(population, 6, 5, 13)
    slow = counting_trial(population, 6, 5, 13)
    for mine, ref in ((("cbf", 5, 6), "cbf"), (("selective_cbf", 5, 6), "selective")):
        assert np.array_equal(fast.outcomes[mine].false_positives, slow[ref].false_positives)
        assert np.array_equal(fast.outcomes[mine].false_negatives, slow[ref].false_negatives)


@pytest.mark.parametrize("value,printed,expected", [
    (0.14699, "1.47e-1", True), (0.1476, "1.47e-1", False), (0.0918, "0.092", True), (8.39e-7, "8.39e-06", False),
    (92.764, "92.76", True), (5.0, "5", True), (5.6, "5", False), (0.0, "0.00", True), (2.4601e6, "2.46e6", True),
])
def test_rounding_rule(value, printed, expected):
    assert rounds_to(value, printed) is expected


def test_verdicts():
    assert verdict_for("0.147", 0.1469) == "match"
    assert verdict_for("0.150", 0.1469, sd=0.002) == "within_noise"
    assert verdict_for("0.150", 0.1469, sd=0.0005) == "differs"
    assert verdict_for("0.150", None) == "differs"


def test_wang64_is_thomas_wangs_hash64shift():
    from bloomwise.reproduce.trace import wang64

    def reference(key):
        mask = (1 << 64) - 1
        key = (~key + (key << 21)) & mask
        key ^= key >> 24
        key = (key + (key << 3) + (key << 8)) & mask
        key ^= key >> 14
        key = (key + (key << 2) + (key << 4)) & mask
        key ^= key >> 28
        return (key + (key << 31)) & mask

    values = [0, 1, 2**32 + 7, 2**64 - 1, 0xDEADBEEFCAFEBABE]
    assert [int(x) for x in wang64(np.array(values, dtype=np.uint64))] == [reference(v) for v in values]


def test_stand_in_trace_tuples_are_distinct_and_both_hashes_agree_with_theory():
    from bloomwise.reproduce.trace import TraceSetup, expected_rates, run_trace, synthetic_tuples

    tuples = synthetic_tuples(5_000, 1)
    assert len(np.unique(tuples)) == 5_000
    setup = TraceSetup(queried=1 << 16, decision_prior=2.0 ** -10)
    for hash_name in ("xxh3", "wang64"):
        run = run_trace(setup, ks=(5,), seed=3, hash=hash_name)
        fpr, fnr = run.rates(5, 1)
        expected = float(expected_rates(setup, 5, [1.0])[0][0])
        # 64,512 non-members: 5 binomial sd plus 15% for one filter's own deviation from the mean
        assert abs(fpr - expected) <= 5 * np.sqrt(expected / 64_512) + 0.15 * expected, (hash_name, fpr, expected)
        assert fnr == 0.0


def test_cli_errors(tmp_path, capsys):
    assert main(["reproduce", "--quick", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["reproduce", "--quick", "--out", str(target)]) == 2
    assert "not a directory" in capsys.readouterr().err
