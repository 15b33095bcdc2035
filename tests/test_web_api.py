"""`bloomwise serve`'s JSON API and plots, over real HTTP: the answers are the library's, bad input is a 4xx
with a JSON reason naming the field, and a proxy's stats are checked before they are shown."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("aiohttp", reason="the web page needs aiohttp (pip install 'bloomwise[web]')")
pytest.importorskip("matplotlib", reason="the web page's plots need matplotlib (pip install 'bloomwise[web]')")

from hypothesis import given, settings, strategies as st  # noqa: E402

from aiohttp import web  # noqa: E402

from bloomwise import paradox, theory  # noqa: E402
from bloomwise.cli._parse import parse_count  # noqa: E402
from bloomwise.theory import plan  # noqa: E402
from bloomwise.web import calculator, cluster, explorer  # noqa: E402
from bloomwise.web.inputs import InputError  # noqa: E402
from bloomwise.web.server import make_app  # noqa: E402
from web_servers import app_in_thread, get, get_json, serve_process, stats_app  # noqa: E402


@pytest.fixture(scope="module")
def base():
    with app_in_thread(make_app()) as url:
        yield url


def api(base, path, **params):
    return get_json(f"{base}{path}?{urllib.parse.urlencode(params)}")


# --- the calculator -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, p, m, k", [("40M", "1e-6", 1_150_207_006, 20), ("10000", "0.001", 143_776, 10)])
def test_calculator_gives_the_reference_calculator_values(base, n, p, m, k):
    """hur.st's values for the classic layout (ecosystem.md): the same k, and m within 1e-5 of hur.st's, which sizes
    by the approximation exp(-kn/m); bloomwise sizes by the exact (1 - 1/m)^(kn) and so may need a few bits more."""
    status, answer = api(base, "/api/plan", n=n, p=p, layout="classic")
    assert status == 200
    exact = plan(n=parse_count(n), p=float(p), layout="classic")
    assert (answer["plan"]["m"], answer["plan"]["k"]) == (exact.m, exact.k)
    assert answer["plan"]["k"] == k and m <= answer["plan"]["m"] <= m * (1 + 1e-5)
    assert answer["given"] == ["n", "p"] and answer["plan"]["solved"] == ["m", "k"]
    assert answer["display"]["m"] == f"{exact.m:,}"


@pytest.mark.parametrize("layout", theory.LAYOUTS)
@pytest.mark.parametrize("fields, inputs", [
    ({"n": "40M", "p": "1e-6"}, {"n": 40_000_000, "p": 1e-6}),
    ({"n": "10000", "p": "0.001"}, {"n": 10_000, "p": 0.001}),
    ({"n": "1e6", "p": "1%", "k": "5"}, {"n": 10 ** 6, "p": 0.01, "k": 5}),
    ({"m": "64KiB", "p": "1 in 10000"}, {"m": 524_288, "p": 1e-4}),
    ({"m": "8MB", "p": "0.001", "k": "8"}, {"m": 64_000_000, "p": 0.001, "k": 8}),
    ({"n": "1000", "m": "9600"}, {"n": 1000, "m": 9600}),
    ({"n": "1,000", "m": "9728", "k": "6"}, {"n": 1000, "m": 9728, "k": 6}),
    ({"n": "2.5k", "m": "1Mib", "p": "0.5"}, {"n": 2500, "m": 1_048_576, "p": 0.5}),
])
def test_every_sufficient_subset_solves_like_theory_plan(base, fields, inputs, layout):
    status, answer = api(base, "/api/plan", **fields, layout=layout)
    try:
        expected = theory.plan(**inputs, layout=layout)
    except ValueError as error:  # e.g. m not a whole number of 512-bit blocks for the blocked layout
        assert status == 400 and answer["fields"] == {"m": str(error)}
        return
    assert status == 200, answer
    assert answer["plan"] == json.loads(json.dumps(expected.as_dict()))
    assert answer["display"]["k"] == str(expected.k)
    # the per-layout rates are the plan's, and the chosen layout is marked
    assert [row["fpr"] for row in answer["fprs"]] == [expected.fpr_classic, expected.fpr_partitioned,
                                                       expected.fpr_blocked]
    assert [row["chosen"] for row in answer["fprs"]] == [name == layout for name in theory.LAYOUTS]


def test_calculator_sizes_the_same_inputs_for_each_layout_and_builds_the_filter(base):
    status, answer = api(base, "/api/plan", n="10000", p="0.001", layout="blocked")
    assert status == 200
    for row in answer["sized"]:
        expected = theory.plan(n=10_000, p=0.001, layout=row["layout"])
        assert (row["m"], row["k"]) == (expected.m, expected.k)
    plan = answer["plan"]
    counting = answer["counting"]
    assert counting["bytes"] == plan["m"] * 4 // 8 + (plan["m"] * 4 % 8 > 0)
    assert counting["overflow_bound"] == theory.counter_overflow_bound(plan["m"], plan["n"], plan["k"], 16)
    # the Python call builds exactly the planned filter
    namespace = {}
    exec(answer["build"]["python"], namespace)  # noqa: S102 - our own generated line
    built = namespace["f"]
    assert (built.num_cells, built.num_hashes, built.layout) == (plan["blocked_num_bits"], plan["k"], "blocked")
    exec(answer["build"]["python_counting"], namespace)  # noqa: S102
    assert namespace["c"].num_hashes == plan["k"]
    assert answer["build"]["cli"] == ("bloomwise build keys.txt -o keys.bloom --capacity 10000 --fpr 0.001 "
                                      "--layout blocked")


@pytest.mark.parametrize("fields, field, words", [
    ({"n": "abc", "p": "0.01"}, "n", "not a number"),
    ({"n": "-5", "p": "0.01"}, "n", "negative"),
    ({"n": "1e6", "p": "1"}, "p", "strictly between 0 and 1"),
    ({"n": "1e6", "p": "1.5"}, "p", "strictly between 0 and 1"),
    ({"n": "1e6", "p": "x%"}, "p", "not a probability"),
    ({"m": "64KB!", "p": "0.01"}, "m", "not a size"),
    ({"m": "-64KiB", "p": "0.01"}, "m", "negative"),
    ({"m": "1e30", "p": "0.01"}, "m", "between 1 bit"),
    ({"n": "1e40", "p": "0.01"}, "n", "between 1 and"),
    ({"n": "0", "p": "0.01"}, "n", "between 1 and"),
    ({"n": "1e6", "p": "0.01", "k": "0"}, "k", "at least 1"),
    ({"n": "1e6", "p": "0.01", "k": "1000"}, "k", "more than 100"),
    ({"n": "1e6", "p": "0.01", "layout": "round"}, "layout", "not one of"),
    ({"n": "1e6"}, "n", "not enough"),
    ({"p": "0.01", "k": "7"}, "_form", "also give n"),
    ({"n": "1e6", "m": "1000", "p": "0.01", "layout": "classic"}, "_form", "inconsistent"),
    ({"m": "8", "p": "1e-9", "layout": "classic"}, "m", "cannot hold even one key"),
    ({"m": "8", "p": "1e-9"}, "m", "multiple of 512"),  # blocked by default, as bloomwise build
    ({"n": "1e15", "p": "1e-300"}, "_form", "largest"),
    ({"n": "1" * 201, "p": "0.01"}, "n", "too long"),
    ({"n": "1e999999999", "p": "0.01"}, "n", "too large"),
    ({"m": "1e-999999999 KiB", "p": "0.01"}, "m", "not a whole number of bits"),
])
def test_bad_calculator_input_is_a_400_naming_the_field(base, fields, field, words):
    status, answer = api(base, "/api/plan", **fields)
    assert status == 400
    assert words in answer["fields"][field], answer
    assert words in answer["error"]
    assert "Traceback" not in json.dumps(answer)


def test_every_bad_field_is_reported_at_once(base):
    status, answer = api(base, "/api/plan", n="x", p="2", m="-1", k="y")
    assert status == 400 and set(answer["fields"]) == {"n", "p", "m", "k"}


_FIELD_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="0123456789eE.-+%/ ,_kKMGTiIbBin", max_size=14),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-320", "0", "-0", "1 in 1", "1 in 0", "1/0", "0%", "100%",
                     "1e999", "1e99999999", "9" * 60, "0x10", "1_", "1,,0", "\x00", "１０", "1e6KiB", "18446744073709551616"]),
)


@settings(deadline=None)
@given(n=_FIELD_TEXT, p=_FIELD_TEXT, m=_FIELD_TEXT, k=_FIELD_TEXT,
       layout=st.sampled_from(["classic", "partitioned", "blocked", "", "x"]))
def test_the_calculator_answers_any_text_with_200_or_a_400_reason(base, n, p, m, k, layout):
    status, answer = api(base, "/api/plan", n=n, p=p, m=m, k=k, layout=layout)
    assert status in (200, 400), answer
    if status == 400:
        assert answer["error"] and answer["fields"]
        assert set(answer["fields"]) <= {"n", "p", "m", "k", "layout", "_form"}
    else:
        assert answer["plan"]["m"] >= 1 and answer["plan"]["k"] >= 1


# --- the paradox explorer -----------------------------------------------------------------------------------------

def test_explorer_answers_are_the_library_s(base):
    status, answer = api(base, "/api/paradox", prior="1e-5", alpha="0.1", bpk="20", counters="5 5", cm="9", cn="6")
    assert status == 200
    fpr = paradox.theorem1_fpr(20.0)
    assert answer["fpr"] == fpr
    assert answer["posterior"] == paradox.posterior(1e-5, fpr)
    assert answer["threshold_prior"] == paradox.theorem1_threshold(20.0, 0.1)
    assert answer["min_bits_per_key"] == paradox.min_bits_per_item(1e-5, 0.1)
    assert answer["paradox"] is (1e-5 < paradox.theorem1_threshold(20.0, 0.1))
    assert answer["counting"]["posterior"] == paradox.cbf_posterior([5, 5], 9, 6, 1e-5)
    assert answer["counting"]["product"] == 25


def test_explorer_decides_with_theorem_1_on_both_sides(base):
    # the paper's section IV.B example, as Theorem 1 gives it: prior 1e-5, alpha 1 needs 23.96 bits per key
    below = api(base, "/api/paradox", prior="1e-5", alpha="1", bpk="23.9")[1]
    above = api(base, "/api/paradox", prior="1e-5", alpha="1", bpk="24")[1]
    assert below["paradox"] is True and above["paradox"] is False
    assert round(below["min_bits_per_key"], 2) == 23.96
    # Theorem 2 / Example 1: a product of 25 beats a product of 10 under the same prior
    five = api(base, "/api/paradox", prior="0.1", counters="5,5", cm="9", cn="6")[1]["counting"]
    ten = api(base, "/api/paradox", prior="0.1", counters="1,10", cm="9", cn="6")[1]["counting"]
    assert five["posterior"] > ten["posterior"]
    zero = api(base, "/api/paradox", counters="3, 0")[1]["counting"]
    assert zero["posterior"] == 0.0 and not zero["present"]


@pytest.mark.parametrize("fields, field, words", [
    ({"prior": "abc"}, "prior", "not a probability"),
    ({"prior": "0"}, "prior", "strictly between"),
    ({"alpha": "-1"}, "alpha", "above 0"),
    ({"alpha": "zero"}, "alpha", "not a number"),
    ({"alpha": "nan"}, "alpha", "above 0"),
    ({"bpk": "-3"}, "bpk", "at least 0"),
    ({"bpk": "1e9"}, "bpk", "at most 200"),
    ({"counters": "1, x"}, "counters", "whole numbers"),
    ({"counters": "1, -2"}, "counters", "whole numbers"),
    ({"counters": "\u00b9"}, "counters", "whole numbers"),  # a digit to str.isdigit, not a number to int()
    ({"counters": ",".join(["1"] * 65)}, "counters", "more than 64"),
    ({"counters": "16"}, "counters", "16 is above 15, the largest value of a 4-bit counter"),
    ({"counters": "99,99,99"}, "counters", "99 is above 15, the largest value of a 4-bit counter"),
    ({"counters": "1, 256", "cbits": "8"}, "counters", "256 is above 255, the largest value of an 8-bit counter"),
    ({"counters": "70000", "cbits": "16"}, "counters", "70000 is above 65535, the largest value of a 16-bit counter"),
    ({"cbits": "5"}, "cbits", "not one of 4, 8, 16"),
    ({"counters": "1,2,3", "cm": "2"}, "counters", "more than the filter's m"),
    ({"cm": "0"}, "cm", "between 1"),
    ({"cn": "lots"}, "cn", "not a number"),
])
def test_bad_explorer_input_is_a_400_naming_the_field(base, fields, field, words):
    status, answer = api(base, "/api/paradox", **fields)
    assert status == 400
    assert words in answer["fields"][field], answer


@settings(deadline=None)
@given(prior=_FIELD_TEXT, alpha=_FIELD_TEXT, bpk=_FIELD_TEXT, counters=_FIELD_TEXT, cbits=_FIELD_TEXT, cm=_FIELD_TEXT,
       cn=_FIELD_TEXT)
def test_the_explorer_answers_any_text_with_200_or_a_400_reason(base, prior, alpha, bpk, counters, cbits, cm, cn):
    status, answer = api(base, "/api/paradox", prior=prior, alpha=alpha, bpk=bpk, counters=counters, cbits=cbits,
                         cm=cm, cn=cn)
    assert status in (200, 400), answer
    if status == 400:
        assert set(answer["fields"]) <= {"prior", "alpha", "bpk", "counters", "cbits", "cm", "cn", "_form"}
    else:
        assert 0.0 <= answer["posterior"] <= 1.0 and 0.0 <= answer["counting"]["posterior"] <= 1.0


# --- plots, static files, errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path, params", [
    ("/api/plan.svg", {"n": "40M", "p": "1e-6"}), ("/api/plan.svg", {"n": "1e4", "p": "1%", "layout": "blocked"}),
    ("/api/paradox/posterior.svg", {}), ("/api/paradox/bits.svg", {"alpha": "5"}),
    ("/api/paradox/counting.svg", {"counters": "15,15,15,15"}),
    ("/api/paradox/counting.svg", {"counters": "300, 2", "cbits": "16"}),
])
def test_plots_are_svg_drawn_by_the_server(base, path, params):
    status, content_type, body = get(f"{base}{path}?{urllib.parse.urlencode(params)}")
    assert status == 200 and content_type.startswith("image/svg+xml")
    assert b"<svg" in body[:1000] and body.rstrip().endswith(b"</svg>")


def test_a_plot_of_bad_input_is_a_400_json_reason(base):
    status, answer = api(base, "/api/plan.svg", n="x", p="0.1")
    assert status == 400 and "n" in answer["fields"]
    status, answer = get_json(f"{base}/api/paradox/nothing.svg")
    assert status == 404


def test_the_page_and_its_files_are_served_with_a_strict_policy(base):
    status, content_type, body = get(base + "/")
    assert status == 200 and content_type.startswith("text/html") and b'id="plan-form"' in body
    for name in ("page.css", "page.js"):
        status, _, _ = get(f"{base}/static/{name}")
        assert status == 200
    with urllib.request.urlopen(base + "/") as response:
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert get(f"{base}/static/index.html")[0] == 404
    assert get(f"{base}/static/..%2f..%2fserver.py")[0] == 404
    status, answer = get_json(f"{base}/api/nothing")
    assert status == 404 and answer["error"]


def test_a_failure_is_a_500_json_reason_without_a_traceback(monkeypatch):
    def broken(query):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(calculator, "calculate", broken)
    with app_in_thread(make_app()) as url:
        status, answer = get_json(f"{url}/api/plan?n=1")
    assert status == 500
    assert "internal error" in answer["error"] and "secret" not in json.dumps(answer)


def test_no_formula_lives_in_the_page_script():
    """One source of truth: the script never computes a rate, a power or a logarithm."""
    from importlib.resources import files

    script = files("bloomwise.web").joinpath("static", "page.js").read_text()
    for forbidden in ("Math.exp", "Math.log", "Math.pow", "**", "Math.LN2", "Math.E"):
        assert forbidden not in script, forbidden


# --- the cluster --------------------------------------------------------------------------------------------------

STATS = {
    "name": "proxy-a", "listen": "127.0.0.1:3128", "uptime_seconds": 12.5, "requests": 1000, "local_hits": 300,
    "remote_hits": 150, "false_hits": 7, "false_misses": 2, "peer_queries": 180, "origin_fetches": 550,
    "summary_bytes_out": 65_600, "summary_bytes_in": 131_200, "peer_queries_served": 90, "hit_ratio": 0.45,
    "peers": {"proxy-b": {"summary_version": 4, "summary_age_seconds": 1.5, "summary_bytes": 65_600, "cost": 1.0,
                          "healthy": True, "rtt_ms": 0.35}},
}


def test_cluster_shows_each_proxy_s_checked_stats(base):
    with app_in_thread(stats_app(lambda: STATS)) as proxy:
        address = proxy.removeprefix("http://")
        status, answer = api(base, "/api/cluster", proxies=f"{address}, 127.0.0.1:1")
    assert status == 200
    up, down = answer["proxies"]
    assert up["ok"] and up["address"] == address
    stats = up["stats"]
    assert {name: stats[name] for name in cluster.COUNTERS} == {name: STATS[name] for name in cluster.COUNTERS}
    assert stats["hit_ratio"] == 0.45 and stats["name"] == "proxy-a" and stats["problems"] == []
    assert stats["peers"] == [{"peer": "proxy-b", "failures": None, "kind": None, "last_error": None,
                               **STATS["peers"]["proxy-b"]}]
    assert not down["ok"] and "cannot reach" in down["error"]
    totals = answer["totals"]
    assert (totals["proxies"], totals["answered"], totals["requests"]) == (2, 1, 1000)
    assert totals["hit_ratio"] == 0.45 and totals["false_hit_ratio"] == 7 / 180


async def _endless(request):
    """A body that never ends (bounded here at 2 GiB): only a bounded read gets past it in time."""
    response = web.StreamResponse()
    await response.prepare(request)
    chunk = b" " * 65536
    try:
        for _ in range(32768):
            await response.write(chunk)
    except (ConnectionError, RuntimeError):
        pass
    return response


@pytest.mark.parametrize("answer, words", [
    (lambda: _endless, "larger than"),
    (lambda: web.Response(text="not json"), "not JSON"),
    (lambda: web.json_response([1, 2]), "not a JSON object"),
    (lambda: web.Response(status=500, text="boom"), "HTTP 500"),
    (lambda: web.Response(body=b"{" + b" " * (cluster.MAX_STATS_BYTES + 10) + b"}"), "larger than"),
    (lambda: web.Response(body=b"\xff\xfe{}"), "not JSON"),
])
def test_cluster_refuses_bad_stats_with_a_reason(base, answer, words):
    with app_in_thread(stats_app(answer)) as proxy:
        status, result = api(base, "/api/cluster", proxies=proxy.removeprefix("http://"))
    assert status == 200
    (entry,) = result["proxies"]
    assert not entry["ok"] and words in entry["error"], entry


def test_cluster_keeps_known_fields_of_the_right_type_only():
    stats = cluster.check_stats({"requests": "many", "local_hits": True, "remote_hits": 3, "name": 7,
                                 "hit_ratio": float("inf"), "extra": "<script>", "peers": {"x": 5, "y": {"rtt_ms": []}}})
    assert stats["requests"] is None and stats["local_hits"] is None and stats["remote_hits"] == 3
    assert stats["name"] is None and stats["hit_ratio"] is None and "extra" not in stats
    assert stats["peers"] == [{"peer": "y", "summary_version": None, "summary_age_seconds": None,
                               "summary_bytes": None, "cost": None, "rtt_ms": None, "failures": None,
                               "kind": None, "last_error": None, "healthy": None}]
    assert len(stats["problems"]) == 6
    # the hit ratio is derived when the proxy does not send it
    assert cluster.check_stats({"requests": 10, "local_hits": 2, "remote_hits": 3})["hit_ratio"] == 0.5
    assert cluster.check_stats({"requests": 1e-300, "local_hits": 1e308})["hit_ratio"] is None
    assert cluster.check_stats({"hit_ratio": 5})["hit_ratio"] is None


@pytest.mark.parametrize("text, words", [
    ("localhost", "not host:port"), ("127.0.0.1:0", "not between 1 and 65535"), ("127.0.0.1:99999", "not between"),
    ("[::1:2:3:4:5:6:7:8]:80", "not an IPv6 address"), ("bad_host:80", "not a host name"), ("http://a:1/x", "not host:port"),
    (",".join(f"127.0.0.1:{port}" for port in range(1, 40)), "more than 32"),
])
def test_bad_proxy_addresses_are_refused(base, text, words):
    with pytest.raises(ValueError, match=words):
        cluster.parse_addresses([text])
    status, answer = api(base, "/api/cluster", proxies=text)
    assert status == 400 and words in answer["fields"]["proxies"]


@settings(deadline=None)
@given(st.text(max_size=60))
def test_any_address_text_parses_or_is_refused_with_a_reason(text):
    try:
        addresses = cluster.parse_addresses([text])
    except ValueError as error:
        assert str(error)
    else:
        for address in addresses:
            assert cluster.parse_address(address) == address


# --- the command --------------------------------------------------------------------------------------------------

def _serve(*args):
    return subprocess.run([sys.executable, "-m", "bloomwise", "serve", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("args, words", [
    (["--listen", "0.0.0.0:0"], "--allow-remote"),
    (["--listen", "nonsense"], "not HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], "not HOST:PORT"),
    (["--proxy", "nowhere"], "--proxy"),
    (["--refresh", "0"], "--refresh"),
])
def test_serve_refuses_bad_arguments_with_exit_2(args, words):
    result = _serve(*args)
    assert result.returncode == 2 and words in result.stderr


def test_serve_answers_and_stops_cleanly_on_sigterm():
    with serve_process("--proxy", "127.0.0.1:3128") as (process, url):
        status, config = get_json(url + "/api/config")
        assert status == 200 and config == {"proxies": ["127.0.0.1:3128"], "refresh_seconds": 2.0}
        answer = get_json(url + "/api/plan?n=1e4&p=0.001")[1]["plan"]
        assert (answer["m"], answer["layout"]) == (plan(n=10_000, p=0.001, layout="blocked").m, "blocked")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


def test_explorer_posterior_is_bayes_with_theorem_1_s_rate():
    answer = explorer.explore({"prior": "1e-6", "bpk": "10"})
    assert math.isclose(answer["posterior"], 1e-6 / (1e-6 + (1 - 1e-6) * 2 ** (-math.log(2) * 10)), rel_tol=1e-12)


def test_serve_on_a_port_in_use_exits_1_with_a_reason():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = _serve("--listen", f"127.0.0.1:{taken.getsockname()[1]}")
    assert result.returncode == 1 and "cannot listen on" in result.stderr


def test_explorer_messages_use_the_page_s_labels():
    with pytest.raises(InputError) as caught:
        explorer.explore({"cm": "0", "bpk": "x"})
    assert caught.value.fields["cm"].startswith("m (counters) '0'")
    assert caught.value.fields["bpk"].startswith("bits per key 'x'")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)
_STATS_LIKE = st.fixed_dictionaries({}, optional={
    **{name: _JSON for name in (*cluster.COUNTERS, "name", "listen", "uptime_seconds", "hit_ratio", "policy",
                                "cache", "summary")},
    "peers": st.dictionaries(st.text(max_size=12), _JSON | st.fixed_dictionaries({}, optional={
        name: _JSON for name in ("summary_version", "summary_age_seconds", "summary_bytes", "cost", "rtt_ms",
                                 "failures", "kind", "last_error", "healthy")}), max_size=3)})


@settings(deadline=None)
@given(st.one_of(_JSON, _STATS_LIKE))
def test_any_json_a_proxy_sends_is_checked_never_trusted(data):
    try:
        stats = cluster.check_stats(data)
    except ValueError:
        assert not isinstance(data, dict)
        return
    for name in (*cluster.COUNTERS, "uptime_seconds", "hit_ratio", "cache_documents", "summary_version"):
        value = stats[name]
        assert value is None or (type(value) in (int, float) and math.isfinite(value))
    for name in ("name", "listen", "policy", "summary_kind"):
        assert stats[name] is None or (isinstance(stats[name], str) and len(stats[name]) <= 200)
    for peer in stats["peers"]:
        assert isinstance(peer["peer"], str) and peer["healthy"] in (None, True, False)
    json.dumps(stats, allow_nan=False)
