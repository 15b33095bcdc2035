"""`bloomwise reproduce --quick` runs end to end and checks its own rows (every verdict follows from the row's own
printed and measured values; computed rows claim no noise); the fast table engine gives exactly the counts of the
library's reference simulation; verdict and rounding rules; the replicate noise; the paper's RBF procedure; Fig. 8's
product 12; the VIII.C threshold intervals; the stand-in trace's hash."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bloomwise.cli import main
from bloomwise.paradox.simulation import Population, bloom_trial, counting_trial
from bloomwise.reproduce.paradox_tables import bloom_seed, counting_seed
from bloomwise.reproduce.rows import (
    METHODS, MIN_NOISE_SAMPLES, VERDICTS, judge, make_row, rounds_to, verdict_for,
)

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
        assert set(row) == {"source", "item", "printed", "measured", "expected", "verdict", "note", "method",
                            "noise_sd", "noise_from", "rounding", "accept"}
        assert row["verdict"] in VERDICTS
        assert row["method"] in METHODS
        if row["verdict"] in ("differs", "misprint", "unavailable"):
            assert row["note"].strip(), row
    assert sum(doc["verdicts"].values()) == len(rows)
    assert sum(doc["methods"].values()) == len(rows)


def _verdict_from_own_values(row) -> str:
    """The verdict a row's own printed and measured values (and its stated noise, rounding, accepted interval) give."""
    accept = tuple(row["accept"]) if row["accept"] is not None else None
    return judge(row["printed"], row["measured"], noise_sd=row["noise_sd"], rounding=row["rounding"], accept=accept)


def test_every_verdict_follows_from_its_own_printed_and_measured_values(quick_run):
    _, doc = quick_run
    wrong = []
    for row in doc["rows"]:
        own = _verdict_from_own_values(row)
        if row["verdict"] == "misprint":
            ok = own == "differs"  # a misprint is a differs whose note names the paper's own arithmetic
        elif row["verdict"] == "unavailable":
            ok = row["measured"] is None
        else:
            ok = own == row["verdict"]
        if not ok:
            wrong.append((row["item"], row["printed"], row["measured"], row["noise_sd"], row["verdict"], own))
    assert not wrong, wrong


def _explains_beyond_its_numbers(row) -> bool:
    """A differs row's note says more than the numbers every simulated row carries."""
    generic = ("measured ", "quick run", "exact expectation")
    return any(part.strip() and not part.startswith(generic) for part in row["note"].split("; "))


def test_every_differs_row_says_why_beyond_its_numbers(quick_run):
    _, doc = quick_run
    bare = [r["item"] for r in doc["rows"] if r["verdict"] == "differs" and not _explains_beyond_its_numbers(r)]
    assert not bare, bare


def test_the_committed_full_run_is_consistent_row_by_row():
    """docs/reproduction/results.json, the committed full run: the same two rules as the quick run's rows."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "reproduction", "results.json")
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    assert doc["settings"]["quick"] is False and doc["settings"]["members_per_type"] == 256
    for row in doc["rows"]:
        own = _verdict_from_own_values(row)
        expected = {"misprint": "differs"}.get(row["verdict"], row["verdict"])
        if row["verdict"] == "unavailable":
            assert row["measured"] is None, row
        else:
            assert own == expected, row
        if row["method"] != "simulated":
            assert row["noise_sd"] is None, row
        if row["verdict"] == "differs":
            assert _explains_beyond_its_numbers(row), row


def test_only_simulated_rows_claim_noise_and_their_noise_rests_on_theory_or_enough_samples(quick_run):
    _, doc = quick_run
    for row in doc["rows"]:
        if row["method"] != "simulated":
            assert row["noise_sd"] is None and row["verdict"] != "within_noise", row
        if row["noise_sd"] is not None:
            source = row["noise_from"]
            assert source, row
            count = int(source.split()[0]) if source.split()[0].isdigit() else None
            assert (count is not None and count >= MIN_NOISE_SAMPLES) or source.startswith(("theory", "delta")), row
    # every Table II/III cell but the RBF's (run once, no noise estimate) has its noise
    for row in _items(doc, "Table II, alpha") + _items(doc, "Table III, alpha"):
        if "Retouched" not in row["item"]:
            assert row["noise_sd"] is not None, row


def test_report_shows_method_and_noise(quick_run):
    out, doc = quick_run
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| item | printed | measured | method | noise sd | expected | verdict | note |" in report
    assert "Method (column `method`)" in report
    first_table_row = next(r for r in doc["rows"] if r["item"].startswith("Table 3, m/n = 2, k = 1"))
    assert f"| {first_table_row['item']} | {first_table_row['printed']} |" in report
    assert "| computed |" in report and "| simulated |" in report


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
                 "Sec. VIII.B", "example m = 5", "m = 8n", "m = 10n", "Fig. 1(a)", "just above 1", "3614",
                 "12.5 - 1", "3 - 1", "four bits per entry", "4x the memory", "n = 2^10", "N = 2^20", "n/N = 2^-10",
                 "30 n / 4", "N = |U|", "2^-3 .. 2^-15", "x's variable sums", "c2 = 4 > h", "stays at 15",
                 "4 bits per count", "Sec. III"):
        assert _items(doc, text), text
    assert len(_items(doc, "Table II(a), bpe")) == len(_items(doc, "Table II(b), bpe")) == 4


def test_known_misprints_are_flagged(quick_run):
    _, doc = quick_run
    misprints = {r["item"] for r in doc["rows"] if r["verdict"] == "misprint"}
    assert "Table 4, m/n = 30, k = 15: (1 - e^(-k n/m))^k" in misprints
    assert "Table 4, m/n = 30, k = 16: (1 - e^(-k n/m))^k" in misprints
    assert any("28.7" in r["printed"] and r["verdict"] == "misprint" for r in doc["rows"])
    assert any("optimum (integral) number" in item for item in misprints)
    # the one cell that breaks the tables' 3-significant-digit convention
    assert "Table 3, m/n = 5, k = 3: (1 - e^(-k n/m))^k" in misprints
    # and nothing else of the printed Summary Cache cells is called wrong
    cells = [r for r in doc["rows"] if ": (1 - e^(-k n/m))^k" in r["item"]]
    assert sum(r["verdict"] == "match" for r in cells) == 408


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


def test_rounding_follows_the_tables_convention():
    assert rounds_to(0.09184883923294045, "0.092")                                   # as printed: 2 digits
    assert not rounds_to(0.09184883923294045, "0.092", "3 significant digits")       # the tables' convention
    assert rounds_to(0.0800, "0.08", "3 significant digits")                          # 0.0800 prints as 0.08
    assert rounds_to(0.02400, "0.024", "3 significant digits")


def test_make_row_refuses_self_contradicting_rows():
    with pytest.raises(ValueError, match="no noise"):
        make_row("s", "a formula", "1.0", 1.2, method="computed", noise_sd=0.1, noise_from="theory")
    with pytest.raises(ValueError, match="misprint"):
        make_row("s", "a typo that is not one", "1.0", 1.0, method="computed", misprint=True, note="x")
    with pytest.raises(ValueError, match="note"):
        make_row("s", "differs without a reason", "1.0", 2.0, method="computed")
    row = make_row("s", "noisy", "1.0", 1.2, method="simulated", noise_sd=0.1, noise_from="theory: x")
    assert row.verdict == "within_noise"
    assert make_row("s", "claim", "about 3", 3.4, method="simulated", accept=(2.5, 3.5)).verdict == "match"
    assert make_row("s", "claim", "about 3", 3.6, method="simulated", accept=(2.5, 3.5), note="x").verdict == "differs"


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


def test_one_run_sd_removes_the_sampling_variance_and_adds_the_binomial_one():
    from bloomwise.reproduce.noise import ReplicateErrors, difference_sd

    errors = ReplicateErrors.empty()
    for fp, fn in ((100.0, 3), (110.0, 5), (90.0, 4), (104.0, 4)):
        errors.add(fp, 20.0, 50.0, fn)
    values = np.array([100.0, 110.0, 90.0, 104.0]) + 5 * np.array([3, 5, 4, 4])
    expected = np.sqrt(np.var(values, ddof=1) - 20.0 + 50.0)
    assert errors.one_run_sd(1.0, 5.0) == pytest.approx(expected, rel=1e-12)
    assert difference_sd(2.0, 3) == pytest.approx(2.0 * np.sqrt(4 / 3))


def test_replicate_noise_of_a_plain_bloom_filter_agrees_with_the_exact_fill_variance():
    """The replicate estimate of one run's FP sd against the exact one for a partitioned BF: Var(FP) =
    Q^2 Var(rho) + Q E[rho (1 - rho)], rho = prod_i F_i, F_i the filled fraction of slice i (occupancy moments).
    With 12 replicates the estimate's relative sd is about 1/sqrt(2 * 11) = 21%, so a factor of 2 either way has a
    false-alarm probability below 1e-3."""
    from bloomwise.reproduce.paradox_tables import bloom_replicates

    population = Population(members_per_type=16, exponents=(3, 4, 5, 6, 7, 8))
    bits = 6
    reps = bloom_replicates(population, bits, (5,), 12, 41, gbf=False)[("bf", 5)]
    m, k = 6 * population.num_members, 4
    n = population.num_members
    q = population.num_nonmembers
    e1 = e2 = 1.0
    for i in range(k):
        w = (i + 1) * m // k - i * m // k
        empty1 = w * (1 - 1 / w) ** n
        empty2 = empty1 + w * (w - 1) * (1 - 2 / w) ** n
        e1 *= 1 - empty1 / w
        e2 *= 1 - 2 * empty1 / w + empty2 / w ** 2
    exact = np.sqrt(q ** 2 * (e2 - e1 ** 2) + q * (e1 - e2))
    assert 0.5 * exact < reps.one_run_sd(1.0, 0.0) < 2.0 * exact


def test_the_papers_rbf_clears_every_false_positive_or_nothing_whichever_costs_less():
    population = Population(members_per_type=8, exponents=(3, 4, 5, 6, 7))
    for bits in (4, 10):
        result = bloom_seed(population, bits, (100, 5), 7, columns=("rbf",))
        for alpha in (100, 5):
            d = result.details[("rbf", alpha)]
            fp, fn, cost = result.outcomes[("rbf", alpha, "paper")].rates(population, alpha)
            assert d["fp_left"] == 0  # Ratio Selection ran until no known false positive was left
            clear_cost = alpha * d["members_lost"]
            keep_cost = d["false_positives_before"]
            assert cost == min(clear_cost, keep_cost)
            assert d["cleared"] == (clear_cost < keep_cost)
            assert (fp == 0) if d["cleared"] else (fn == 0)
            assert ("rbf_cost_aware", alpha, "ratio") in result.outcomes


def test_fig8_printed_posteriors_are_theorem2_at_product_12_and_the_thresholds_need_attainable_products():
    from bloomwise.reproduce.counter_products import attainable_products, theorem2_posterior

    m, n, k = 26624, 3328, 6
    for e, printed in ((3, 0.90594), (5, 0.68504), (7, 0.34679)):
        assert round(float(theorem2_posterior(12, 2.0 ** -e, m, n, k)), 5) == printed
        assert round(float(theorem2_posterior(8, 2.0 ** -e, m, n, k)), 5) != printed
    products = attainable_products(6, 15, 100)
    assert 23 not in products and 22 in products and 24 in products and 91 in products and 97 not in products


def test_isotonic_fractions_pool_violators():
    from bloomwise.reproduce.counter_products import ProductCounts, isotonic_fractions

    members = {3: np.array([0, 1, 6, 2, 9, 0])}
    keys = {3: np.array([0, 10, 10, 10, 10, 0])}
    fitted = dict(isotonic_fractions(ProductCounts(members, keys, 1, 1, 1, 1), 3))
    assert fitted == {1: 0.1, 2: 0.4, 3: 0.4, 4: 0.9}


def test_one_interval_of_alpha_gives_both_printed_thresholds():
    from bloomwise.reproduce.engine import threshold_intervals
    from bloomwise.reproduce.trace import TraceSetup

    iv = threshold_intervals(TraceSetup())
    assert iv["overlap"]
    low, high = iv["r"]
    assert low == pytest.approx(5 / (2 / 3) ** 5) and high == pytest.approx(10 / 0.8 ** 6)
    for r in (low * 1.0001, high):
        assert np.ceil(r * (2 / 3) ** 5 - 1e-9) == 6 and np.ceil(r * 0.8 ** 6 - 1e-9) == 10
    a_low, a_high = iv["alpha"]
    assert 26.8 < a_low < a_high < 27.0
