"""`bloomwise serve` in a real browser: headless Chromium (Debian's package) driven by Playwright for Python.

The tests type into the page, compare what it shows with `bloomwise.theory.plan` and `bloomwise.paradox`, reload
from the URL, check the messages next to bad fields, watch a cluster's stats refresh, and save screenshots: in
$BLOOMWISE_SCREENSHOTS when set, else in pytest's temporary directory (both kept as test artefacts).
Skipped, with the reason, only when Playwright or a Chromium binary is missing (scripts/system-deps.sh installs
Debian's chromium; never `playwright install`).
"""
from __future__ import annotations

import itertools
import os
import pathlib
import shutil
import urllib.parse

import pytest

pytest.importorskip("aiohttp", reason="the web page needs aiohttp (pip install 'bloomwise[web]')")
pytest.importorskip("matplotlib", reason="the web page's plots need matplotlib (pip install 'bloomwise[web]')")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="the browser tests need Playwright for Python (pip install playwright)")

from bloomwise import BloomFilter, paradox, theory  # noqa: E402
from bloomwise.theory import plan  # noqa: E402
from bloomwise.web.explorer import DEFAULTS as PARADOX_DEFAULTS  # noqa: E402
from web_servers import app_in_thread, serve_process, stats_app  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
TIMEOUT_MS = 60_000


def _chromium() -> str | None:
    for candidate in (os.environ.get("BLOOMWISE_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium binary found (Debian package chromium: scripts/system-deps.sh installs it, "
                    "or set BLOOMWISE_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


_counter = itertools.count(1000)


def _stats():
    """A stand-in proxy's stats: the request count grows at every call, as a live proxy's does."""
    requests = next(_counter)
    return {"name": "proxy-a", "listen": "127.0.0.1:3128", "uptime_seconds": 42.0, "requests": requests,
            "local_hits": requests // 3, "remote_hits": requests // 8, "false_hits": 5, "false_misses": 1,
            "peer_queries": requests // 6, "origin_fetches": requests // 2, "summary_bytes_out": 65_600,
            "summary_bytes_in": 131_200, "peer_queries_served": 77,
            "hit_ratio": (requests // 3 + requests // 8) / requests,
            "peers": {"proxy-b": {"summary_version": 9, "summary_age_seconds": 0.8, "summary_bytes": 65_600,
                                  "cost": 1.0, "healthy": True, "rtt_ms": 0.31},
                      "proxy-c": {"summary_version": 2, "summary_age_seconds": 40.0, "summary_bytes": 65_600,
                                  "cost": 1.0, "healthy": False, "rtt_ms": None}}}


@pytest.fixture(scope="module")
def proxy():
    with app_in_thread(stats_app(_stats)) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def server(proxy):
    with serve_process("--refresh", "0.5", "--proxy", proxy) as (_, url):
        yield url


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    directory = os.environ.get("BLOOMWISE_SCREENSHOTS")
    path = pathlib.Path(directory) if directory else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ready(page):
    page.wait_for_selector("body[data-ready=true]")


def _answered(page, panel: str, fields: dict, names) -> None:
    """Wait until ``panel`` shows the server's answer (or errors) for exactly these fields (the page marks it)."""
    query = urllib.parse.urlencode([(name, fields[name].strip()) for name in names
                                    if fields.get(name, "").strip()])
    page.wait_for_selector(f'#{panel}[data-answered="{query}"]', state="attached")


def _plan_shown(page) -> dict:
    return {name: page.get_attribute(f"#out-{name}", "data-value") for name in ("n", "p", "m", "k")}


def _type_plan(page, **fields):
    for name in ("n", "p", "m", "k"):
        page.fill(f"#{name}", fields.get(name, ""))
    page.select_option("#layout", fields.get("layout", "blocked"))
    _answered(page, "plan-results", {"layout": "blocked", **fields}, ("n", "p", "m", "k", "layout"))


@pytest.mark.parametrize("layout", theory.LAYOUTS)
def test_typed_fields_solve_like_theory_plan_and_reload_from_the_url(server, page, shots, layout):
    page.goto(server + "/")
    _ready(page)
    _type_plan(page, n="40M", p="1e-6", layout=layout)
    expected = theory.plan(n=40_000_000, p=1e-6, layout=layout)
    assert _plan_shown(page) == {"n": "40000000", "p": "0.000001", "m": str(expected.m), "k": str(expected.k)}
    # blank fields show the solved values, the results say which were solved
    assert page.get_attribute("#m", "placeholder") == str(expected.m)
    assert page.get_attribute("#k", "placeholder") == str(expected.k)
    assert page.text_content("#tag-m") == "solved" and page.text_content("#tag-n") == "given"
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert query["n"] == ["40M"] and query["p"] == ["1e-6"]
    assert query.get("layout", ["blocked"]) == [layout]  # the default (blocked, as bloomwise build) is left out
    page.wait_for_selector("#plan-plot[data-loaded=true]")
    page.screenshot(path=str(shots / f"calculator-40M-1e-6-{layout}.png"), full_page=True)

    page.reload()
    _ready(page)
    assert page.input_value("#n") == "40M" and page.input_value("#layout") == layout
    assert _plan_shown(page)["m"] == str(expected.m)


def test_an_answer_aborted_while_its_body_is_read_is_dropped(server, page):
    """A newer request aborts the one before; when that happens while its body is read, the page must drop it as
    when the fetch itself aborts (it once rendered it as an answer: a JavaScript error). An answer that is not JSON
    is an error, whatever its status."""
    page.goto(server + "/")
    _ready(page)
    outcome = page.evaluate("""async () => {
        const realFetch = window.fetch, outcome = {};
        const answering = (error) => async () => ({ok: true, status: 200, json: async () => { throw error; }});
        try {
            window.fetch = answering(new DOMException("the request was replaced", "AbortError"));
            try {
                await getJson("/api/plan?n=1");
                outcome.aborted = "rendered";
            } catch (error) {
                outcome.aborted = error.name;
            }
            window.fetch = answering(new SyntaxError("Unexpected token"));
            const answer = await getJson("/api/plan?n=1");
            outcome.notJson = [answer.ok, answer.body.error];
        } finally {
            window.fetch = realFetch;
        }
        return outcome;
    }""")
    assert outcome == {"aborted": "AbortError", "notJson": [False, "HTTP 200: the answer is not JSON"]}


def test_the_reference_calculator_values_show_on_the_page(server, page):
    page.goto(server + "/?n=10000&p=0.001&layout=classic")
    _ready(page)
    exact = plan(n=10_000, p=0.001)  # hur.st: 143,776 (by exp(-kn/m)); bloomwise sizes by the exact rate
    assert _plan_shown(page) == {"n": "10000", "p": "0.001", "m": str(exact.m), "k": "10"}
    assert page.text_content("#out-m") == f"{exact.m:,}"
    page.goto(server + "/?n=40M&p=1e-6&layout=classic")
    _ready(page)
    assert (page.text_content("#out-m"), page.text_content("#out-k")) == (f"{plan(n=40_000_000, p=1e-6).m:,}", "20")
    # every layout's real rate at this m and k, next to the chosen one
    rows = page.locator("#fpr-table tbody tr")
    assert rows.count() == 3
    assert "k > 16" in page.text_content("tr[data-testid=fpr-blocked]")


def test_units_and_one_in_n_are_understood(server, page):
    page.goto(server + "/")
    _ready(page)
    _type_plan(page, m="64KiB", p="1 in 10000", k="7", layout="classic")
    expected = theory.plan(m=524_288, p=1e-4, k=7)
    assert _plan_shown(page) == {"n": str(expected.n), "p": "0.0001", "m": "524288", "k": "7"}
    assert page.text_content("#out-p-one-in") == "(1 in 10,000)"
    assert "BloomFilter.from_size(524288, num_hashes=7, layout='classic')" in page.text_content("#build-python")


@pytest.mark.parametrize("field, text, words", [
    ("n", "lots", "not a number"), ("n", "-5", "negative"), ("p", "1", "strictly between 0 and 1"),
    ("p", "2%x", "not a probability"), ("m", "1e30", "between 1 bit"), ("k", "0", "at least 1"),
])
def test_bad_input_shows_a_message_next_to_the_field(server, page, shots, field, text, words):
    fields = {"n": "1e6", "p": "1%"}
    fields[field] = text
    page.goto(server + "/")
    _ready(page)
    _type_plan(page, **fields)
    page.wait_for_selector(f"#{field}-error:not(:empty)")
    assert words in page.text_content(f"#{field}-error")
    assert page.get_attribute(f"#{field}", "aria-invalid") == "true"
    assert "stale" in page.get_attribute("#plan-results", "class")
    others = [name for name in ("n", "p", "m", "k") if name != field]
    assert all(page.text_content(f"#{name}-error") == "" for name in others)
    if field == "n" and text == "lots":
        page.screenshot(path=str(shots / "calculator-bad-input.png"), full_page=True)
    # fixing the field clears the message
    _type_plan(page, n="1e6", p="1%")
    page.wait_for_selector(f"#{field}-error:empty", state="attached")
    assert page.get_attribute(f"#{field}", "aria-invalid") == "false"


def test_insufficient_fields_say_what_is_missing(server, page):
    page.goto(server + "/")
    _ready(page)
    _type_plan(page, n="1e6")
    page.wait_for_selector("#n-error:not(:empty)")
    assert "also give p" in page.text_content("#n-error")


def test_paradox_explorer_shows_the_library_s_decision(server, page, shots):
    page.goto(server + "/?prior=1e-5&alpha=1&bpk=10#paradox")
    _ready(page)
    assert page.get_attribute("#paradox-decision", "data-paradox") == "true"
    fpr = paradox.theorem1_fpr(10.0)
    assert page.text_content("#out-posterior") == f"{paradox.posterior(1e-5, fpr):.4g}"
    assert page.text_content("#out-min-bits") == f"{paradox.min_bits_per_item(1e-5, 1.0):.4g}"
    # enough bits per key: the paradox is gone
    page.fill("#bpk", "24")
    _answered(page, "paradox-results", {**PARADOX_DEFAULTS, "bpk": "24"}, PARADOX_DEFAULTS)
    assert page.get_attribute("#paradox-decision", "data-paradox") == "false"
    assert "bpk=24" in page.url
    for plot in ("posterior", "bits", "counting"):
        page.wait_for_selector(f"#{plot}-plot[data-loaded=true]")
    page.fill("#alpha", "-2")
    page.wait_for_selector("#alpha-error:not(:empty)")
    assert "above 0" in page.text_content("#alpha-error")
    page.fill("#alpha", "1")
    page.wait_for_selector("#alpha-error:empty", state="attached")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(shots / "paradox.png"), full_page=True)


def test_cluster_view_refreshes_a_proxy_s_stats_live(server, proxy, page, shots):
    page.goto(server + "/#cluster")
    _ready(page)
    assert page.input_value("#proxies") == proxy  # from `bloomwise serve --proxy`
    card = f"article[data-address='{proxy}']"
    page.wait_for_selector(f"{card} dd[data-field=requests]")
    first = int(page.text_content(f"{card} dd[data-field=requests]").replace(",", ""))
    for _ in range(100):  # refreshed every 0.5 s: the count grows
        page.wait_for_timeout(200)
        now = int(page.text_content(f"{card} dd[data-field=requests]").replace(",", ""))
        if now > first:
            break
    assert now > first
    assert page.text_content(f"{card} tr[data-testid=peer-proxy-c]").count("no") >= 1
    assert "unhealthy" in page.get_attribute(f"{card} tr[data-testid=peer-proxy-c]", "class")
    page.screenshot(path=str(shots / "cluster.png"), full_page=True)
    # a proxy that does not answer is shown as down, with the reason; a bad address is refused next to the field
    page.fill("#proxies", f"{proxy}, 127.0.0.1:1")
    page.wait_for_selector("article[data-address='127.0.0.1:1'].down")
    assert "cannot reach" in page.text_content("article[data-address='127.0.0.1:1'] .error")
    page.fill("#proxies", "nowhere")
    page.wait_for_selector("#proxies-error:not(:empty)")
    assert "not host:port" in page.text_content("#proxies-error")


def test_cluster_view_of_real_bloomwise_proxies(server, page, shots):
    """Two `bloomwise proxy` processes and a test origin (bloomwise.proxy.cluster): the page shows what each proxy's
    /bloomwise/stats says, and a killed proxy turns to "down" at the next refresh."""
    import json
    import time
    import urllib.request

    proxy_cluster = pytest.importorskip("bloomwise.proxy.cluster", reason="needs bloomwise proxy (branch issue14)")
    with proxy_cluster.Cluster(2, origin_documents=20) as cluster:
        through = [urllib.request.build_opener(urllib.request.ProxyHandler({"http": url}))
                   for url in cluster.proxy_urls]
        for opener in through:  # the second proxy's requests can be remote hits once the first one's summary arrived
            for i in range(4):
                opener.open(f"{cluster.origin_url}/doc/{i}", timeout=30).read()
            time.sleep(1.5)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        truth = [json.loads(direct.open(url + "/bloomwise/stats", timeout=30).read()) for url in cluster.proxy_urls]
        addresses = [url.removeprefix("http://") for url in cluster.proxy_urls]
        page.goto(server + "/?" + urllib.parse.urlencode({"proxies": ", ".join(addresses)}) + "#cluster")
        _ready(page)
        for address, stats in zip(addresses, truth):
            card = f"article[data-address='{address}']"
            page.wait_for_selector(f"{card}.up dd[data-field=requests]")
            assert stats["name"] in page.text_content(f"{card} h3")
            assert page.text_content(f"{card} dd[data-field=requests]") == f"{stats['requests']:,}" == "4"
            assert page.text_content(f"{card} dd[data-field=hit_ratio]") == f"{100 * stats['hit_ratio']:.1f}%"
            assert page.text_content(f"{card} dd[data-field=remote_hits]") == f"{stats['remote_hits']:,}"
            (peer,) = stats["peers"]
            assert page.locator(f"{card} tr[data-testid='peer-{peer}']").count() == 1
        total = sum(stats["requests"] for stats in truth)
        page.wait_for_selector(f"#cluster-totals[data-requests='{total}']")
        assert f"{total:,} requests" in page.text_content("#cluster-totals")
        page.screenshot(path=str(shots / "cluster-real-proxies.png"), full_page=True)
        cluster.kill(1)
        page.wait_for_selector(f"article[data-address='{addresses[1]}'].down")
        assert "cannot reach" in page.text_content(f"article[data-address='{addresses[1]}'] .error")
        page.wait_for_selector(f"article[data-address='{addresses[0]}'].up")


# --- layout: a desktop and a phone, valid and invalid input ---------------------------------------------------------

LAYOUT_CHECK = """() => {
    const problems = [];
    const width = document.documentElement.clientWidth;
    const describe = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
        (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "");
    const visible = (el) => {
        const box = el.getBoundingClientRect();
        return box.width > 0 && box.height > 0 && getComputedStyle(el).visibility !== "hidden";
    };
    if (document.documentElement.scrollWidth > width) {
        problems.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${width} px window`);
    }
    for (const el of document.querySelectorAll("header *, main *, footer *")) {
        if (!visible(el) || (el.parentElement && el.parentElement.closest(".table-wrap, pre"))) continue;
        const box = el.getBoundingClientRect();  // scrollers (.table-wrap, pre) are checked, not their content
        if (box.left < -1 || box.right > width + 1) {
            problems.push(`${describe(el)} spans ${Math.round(box.left)}..${Math.round(box.right)} px`);
        }
    }
    for (const tile of document.querySelectorAll("dl.solved dd")) {
        if (visible(tile) && tile.scrollWidth > tile.clientWidth + 1) problems.push(`${describe(tile)} is cut`);
    }
    for (const image of document.images) {
        if (visible(image) && (!image.complete || image.naturalWidth === 0)) {
            problems.push(`broken image ${describe(image)}`);
        }
    }
    for (const el of document.querySelectorAll("[id^=out-], .facts, .decision, .results h2, .badge")) {
        if (visible(el) && !el.textContent.trim()) problems.push(`empty ${describe(el)}`);
    }
    const text = document.querySelector("main").innerText;
    for (const hole of [/undefined/, /NaN/, /\\bnull\\b/, /=\\s+bits per key/, /uses\\s+\\u00d7/, /\\(\\s*\\)/]) {
        if (hole.test(text)) problems.push(`a sentence with a hole: ${hole}`);
    }
    return problems;
}"""


def _layout_problems(page) -> list:
    """What the layout check finds: sideways overflow, cut tiles, broken images, empty or holed sentences. Plots
    are brought into view first (they load lazily) and waited for."""
    for image in page.locator("img:visible").all():
        image.scroll_into_view_if_needed()
        page.wait_for_selector(f"#{image.get_attribute('id')}[data-loaded=true]")
    page.evaluate("window.scrollTo(0, 0)")
    return page.evaluate(LAYOUT_CHECK)


@pytest.fixture(params=[1280, 390], ids=["1280px", "390px"])
def sized_page(browser, request):
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.width = request.param
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def test_the_page_fits_and_keeps_the_last_valid_plan_out_of_date(server, sized_page, shots):
    page, width = sized_page, sized_page.width
    page.goto(server + "/")
    _ready(page)
    default = BloomFilter(10 ** 6, 0.01)  # the page's first plan is the filter bloomwise build makes
    assert _plan_shown(page) == {"n": "1000000", "p": "0.01", "m": str(default.num_cells), "k": str(default.num_hashes)}
    assert page.get_attribute("#plan-results", "data-state") == "current"
    assert _layout_problems(page) == []
    page.screenshot(path=str(shots / f"layout-{width}-calculator.png"), full_page=True)

    _type_plan(page, n="lots", p="1%")  # invalid: the last valid plan stays, dimmed and marked out of date
    page.wait_for_selector("#n-error:not(:empty)")
    assert page.get_attribute("#plan-results", "data-state") == "stale"
    assert page.is_visible("#plan-stale") and "Out of date" in page.text_content("#plan-stale")
    assert _plan_shown(page)["m"] == str(default.num_cells)
    assert _layout_problems(page) == []
    page.screenshot(path=str(shots / f"layout-{width}-calculator-invalid.png"), full_page=True)

    page.goto(server + "/?prior=1e-5&alpha=1&bpk=10#paradox")
    _ready(page)
    assert _layout_problems(page) == []
    page.screenshot(path=str(shots / f"layout-{width}-paradox.png"), full_page=True)


def test_invalid_input_on_arrival_is_a_clear_empty_state(server, sized_page, shots):
    page, width = sized_page, sized_page.width
    page.goto(server + "/?n=lots&p=1%")
    _ready(page)
    assert page.get_attribute("#plan-results", "data-state") == "empty"
    assert page.is_visible("#plan-empty") and not page.is_visible("#out-m") and not page.is_visible("#plan-plot")
    assert "not a number" in page.text_content("#n-error")
    assert _layout_problems(page) == []
    page.screenshot(path=str(shots / f"layout-{width}-calculator-empty.png"), full_page=True)

    page.goto(server + "/?counters=99,99,99#paradox")
    _ready(page)
    assert page.get_attribute("#paradox-results", "data-state") == "empty"
    assert page.is_visible("#paradox-empty") and not page.is_visible("#posterior-plot")
    assert "99 is above 15, the largest value of a 4-bit counter" in page.text_content("#counters-error")
    assert _layout_problems(page) == []
    page.screenshot(path=str(shots / f"layout-{width}-paradox-empty.png"), full_page=True)


def test_the_explorer_refuses_counters_its_counter_width_cannot_hold(server, page):
    page.goto(server + "/#paradox")
    _ready(page)
    page.fill("#counters", "99, 99, 99")
    page.wait_for_selector("#counters-error:not(:empty)")
    assert "99 is above 15, the largest value of a 4-bit counter" in page.text_content("#counters-error")
    assert page.get_attribute("#paradox-results", "data-state") == "stale"
    page.select_option("#cbits", "8")  # 8-bit counters hold 99
    page.wait_for_selector("#counters-error:empty", state="attached")
    page.wait_for_selector("#paradox-results[data-state=current]")
    assert "99, 99, 99" in page.text_content("#counting-facts") and "cbits=8" in page.url
