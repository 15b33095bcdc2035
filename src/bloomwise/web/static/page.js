// bloomwise serve: the page's behaviour. No math here: every number comes from the server's JSON API
// (/api/plan, /api/paradox, /api/cluster), which calls bloomwise.theory and bloomwise.paradox; the plots are SVG
// drawn by the server. This script only reads fields, keeps the state in the URL and shows the answers as text.
"use strict";

const PLAN_FIELDS = ["n", "p", "m", "k", "layout"];
const PARADOX_FIELDS = ["prior", "alpha", "bpk", "counters", "cbits", "cm", "cn"];
const PARADOX_DEFAULTS = {prior: "1e-5", alpha: "1", bpk: "10", counters: "1, 10", cbits: "4", cm: "1000", cn: "100"};
const PLAN_DEFAULTS = {n: "1e6", p: "1%"};
const DEFAULT_LAYOUT = "blocked";  // as bloomwise build, BloomFilter() and bloomwise plan
const VIEWS = ["calculator", "paradox", "cluster"];

const $ = (id) => document.getElementById(id);

function setText(id, text) {
  const element = $(id);
  if (element) element.textContent = text == null ? "" : String(text);
}

function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "n/a";
  if (typeof x !== "number") return String(x);
  if (x === 0) return "0";
  const magnitude = Math.abs(x);
  if (magnitude >= 1e-3 && magnitude < 1e6) return Number(x.toPrecision(digits)).toString();
  return x.toExponential(digits - 1);
}

function fmtInt(x) {
  return x === null || x === undefined ? "n/a" : Number(x).toLocaleString("en-US");
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

// ---- the URL holds the whole state: ?n=&p=&m=&k=&layout=&prior=...&proxies=...#view ----
function readUrl() {
  return new URLSearchParams(window.location.search);
}

function writeUrl() {
  const params = new URLSearchParams();
  for (const name of [...PLAN_FIELDS, ...PARADOX_FIELDS, "proxies"]) {
    const element = $(name);
    const value = element ? element.value.trim() : "";
    if (value && !(name === "layout" && value === DEFAULT_LAYOUT) && !(name === "cbits" && value === "4")) {
      params.set(name, value);
    }
  }
  const query = params.toString();
  const url = window.location.pathname + (query ? "?" + query : "") + window.location.hash;
  window.history.replaceState(null, "", url);
  const link = $("plan-link");
  if (link) link.href = url;
}

function queryOf(names) {
  const params = new URLSearchParams();
  for (const name of names) {
    const value = $(name).value.trim();
    if (value) params.set(name, value);
  }
  return params.toString();
}

function showErrors(names, fields, formId) {
  for (const name of names) {
    const message = (fields && fields[name]) || "";
    setText(name + "-error", message);
    $(name).classList.toggle("invalid", Boolean(message));
    $(name).setAttribute("aria-invalid", message ? "true" : "false");
  }
  setText(formId, (fields && fields._form) || "");
}

async function getJson(url, signal) {
  const response = await fetch(url, {signal, headers: {Accept: "application/json"}});
  try {
    return {ok: response.ok, status: response.status, body: await response.json()};
  } catch (error) {
    // aborted while its body was read (a newer request replaced it): the caller drops it, as when fetch aborts
    if (error.name === "AbortError") throw error;
    return {ok: false, status: response.status, body: {error: `HTTP ${response.status}: the answer is not JSON`}};
  }
}

// ---- views (tabs) ----
function showView(name) {
  if (!VIEWS.includes(name)) name = "calculator";
  for (const view of VIEWS) {
    $(view).hidden = view !== name;
    $("tab-" + view).setAttribute("aria-selected", view === name ? "true" : "false");
  }
  if (name === "cluster") startCluster(); else stopCluster();
}

// ---- calculator ----
let planRequest = null;

async function updatePlan() {
  writeUrl();
  const query = queryOf(PLAN_FIELDS);
  if (planRequest) planRequest.abort();
  planRequest = new AbortController();
  let answer;
  try {
    answer = await getJson("/api/plan?" + query, planRequest.signal);
  } catch (error) {
    if (error.name !== "AbortError") setText("plan-form-error", "the server did not answer: " + error.message);
    return;
  }
  const results = $("plan-results");
  if (!answer.ok) {
    showErrors(PLAN_FIELDS, answer.body.fields || {_form: answer.body.error}, "plan-form-error");
    markOutOfDate(results, ["plan-plot"]);
    for (const name of ["n", "p", "m", "k"]) $(name).placeholder = "";
  } else {
    showErrors(PLAN_FIELDS, {}, "plan-form-error");
    markCurrent(results, ["plan-plot"]);
    renderPlan(answer.body, query);
  }
  results.dataset.answered = query;  // which fields the page now shows the answer for
}

// A results panel is "empty" until its first valid answer (only a message shows, never a sentence with holes), then
// "current", or "stale" while the fields are invalid: the last valid answer stays, dimmed and marked out of date.
function markOutOfDate(results, plots) {
  if (results.dataset.state === "empty") return;
  results.dataset.state = "stale";
  results.classList.add("stale");
  for (const id of plots) $(id).classList.add("stale");
}

function markCurrent(results, plots) {
  results.dataset.state = "current";
  results.classList.remove("stale");
  for (const id of plots) $(id).classList.remove("stale");
}

function renderPlan(answer, query) {
  const plan = answer.plan, display = answer.display;
  for (const name of ["n", "p", "m", "k"]) {
    const given = answer.given.includes(name);
    setText("tag-" + name, given ? "given" : "solved");
    $("tag-" + name).className = "tag " + (given ? "given" : "solved");
    $("out-" + name).dataset.value = String(plan[name]);
    if (!given) $(name).placeholder = name === "p" ? display.p : name === "m" ? String(plan.m) : display[name];
  }
  setText("out-n", display.n);
  setText("out-p", display.p);
  setText("out-p-one-in", "(" + display.p_one_in + ")");
  setText("out-m", display.m);
  setText("out-m-size", display.m_size);
  setText("out-k", display.k);
  setText("plan-layout", plan.layout + " layout");
  setText("out-bpk", display.bits_per_key);
  setText("out-limit", display.information_limit);
  setText("out-overhead", display.overhead);

  const fprBody = $("fpr-table").tBodies[0];
  fprBody.replaceChildren(...answer.fprs.map((row) => tableRow([
    row.layout, row.fpr === null ? "not available" : fmt(row.fpr), row.fpr_one_in || "", row.note],
    row.chosen ? "chosen" : "", "fpr-" + row.layout)));
  const sizedBody = $("sized-table").tBodies[0];
  sizedBody.replaceChildren(...answer.sized.map((row) => row.error ?
    tableRow([row.layout, row.error], "", "sized-" + row.layout, 5) :
    tableRow([row.layout, fmtInt(row.n), fmtInt(row.m), row.k, fmt(row.bits_per_key), fmt(row.fpr)],
             row.layout === plan.layout ? "chosen" : "", "sized-" + row.layout)));

  const c = answer.counting;
  setText("counting", `${fmtInt(c.num_counters)} counters of ${c.counter_bits} bits: ${fmtInt(c.bytes)} bytes ` +
    `(${c.size}), ${c.counter_bits}x the bit array. Pr(some counter reaches ${c.overflow_threshold}) ` +
    `\u2264 ${fmt(c.overflow_bound, 3)} (Summary Cache's bound${c.overflow_bound >= 1 ? ": says nothing here" : ""}); ` +
    `expected largest counter \u2248 ${fmt(c.expected_max_count, 3)}.`);
  setText("build-cli", "$ " + answer.build.cli);
  setText("build-cli-note", "The command " + answer.build.cli_note + ".");
  setText("build-python", answer.build.python);
  setText("build-python-counting", answer.build.python_counting);
  setPlot("plan-plot", "/api/plan.svg?" + query);
}

// A plot's <img> says when its SVG has arrived: data-loaded="true" (or "error"), "false" while it loads. Its
// figure shows once the plot has a URL, and hides again if the SVG cannot be drawn (never a broken image).
function setPlot(id, url) {
  const image = $(id);
  const figure = image.closest("figure");
  if (image.getAttribute("src") === url) return;
  image.dataset.loaded = "false";
  image.onload = () => { image.dataset.loaded = "true"; figure.hidden = false; };
  image.onerror = () => { image.dataset.loaded = "error"; figure.hidden = true; };
  image.src = url;
  figure.hidden = false;
}

function tableRow(cells, className, testId, lastSpan) {
  const tr = document.createElement("tr");
  if (className) tr.className = className;
  if (testId) tr.dataset.testid = testId;
  cells.forEach((cell, index) => {
    const td = document.createElement(index === 0 ? "th" : "td");
    td.textContent = cell == null ? "" : String(cell);
    if (lastSpan && index === cells.length - 1) td.colSpan = lastSpan;
    tr.appendChild(td);
  });
  return tr;
}

// ---- paradox explorer ----
let paradoxRequest = null;

async function updateParadox() {
  writeUrl();
  const query = queryOf(PARADOX_FIELDS);
  if (paradoxRequest) paradoxRequest.abort();
  paradoxRequest = new AbortController();
  let answer;
  try {
    answer = await getJson("/api/paradox?" + query, paradoxRequest.signal);
  } catch (error) {
    if (error.name !== "AbortError") setText("paradox-form-error", "the server did not answer: " + error.message);
    return;
  }
  const results = $("paradox-results");
  const plots = ["posterior-plot", "bits-plot", "counting-plot"];
  results.dataset.answered = query;
  if (!answer.ok) {
    showErrors(PARADOX_FIELDS, answer.body.fields || {_form: answer.body.error}, "paradox-form-error");
    markOutOfDate(results, plots);
    return;
  }
  showErrors(PARADOX_FIELDS, {}, "paradox-form-error");
  markCurrent(results, plots);
  const a = answer.body;
  const decision = $("paradox-decision");
  decision.textContent = (a.paradox ? "Bloom paradox: " : "No paradox: ") + a.decision;
  decision.className = "decision " + (a.paradox ? "bad" : "good");
  decision.dataset.paradox = String(a.paradox);
  setText("out-fpr", fmt(a.fpr));
  setText("out-posterior", fmt(a.posterior));
  setText("out-threshold", fmt(a.threshold_prior));
  setText("out-min-bits", a.min_bits_per_key === null ? "never enough" : fmt(a.min_bits_per_key));
  setText("paradox-facts", `With ${a.inputs.bpk} bits per key a filter with the best integer k ` +
    `(k = ${a.integer_k.k}) has an FPR of ${fmt(a.integer_k.fpr)}; Theorem 1 assumes the real optimum. ` +
    `A positive answer is trusted when the prior is at least the threshold prior, that is when the ` +
    `posterior reaches 1/(1+\u03b1) = ${fmt(a.decision_threshold)} (Theorem 4).`);
  const c = a.counting;
  const countingDecision = $("counting-decision");
  countingDecision.textContent = c.decision;
  countingDecision.className = "decision small " + (c.present ? "good" : "bad");
  setText("counting-facts", `Counters ${c.counters.join(", ")} (k = ${c.k}) multiply to ${fmtInt(c.product)}; ` +
    `in a filter of ${fmtInt(c.m)} counters holding ${fmtInt(c.n)} keys, Pr(key in the set | counters) = ` +
    `${fmt(c.posterior)} against the threshold ${fmt(c.decision_threshold)}.`);
  setPlot("posterior-plot", "/api/paradox/posterior.svg?" + query);
  setPlot("bits-plot", "/api/paradox/bits.svg?" + query);
  setPlot("counting-plot", "/api/paradox/counting.svg?" + query);
}

// ---- cluster ----
let clusterTimer = null, clusterBusy = false, refreshSeconds = 2;

function startCluster() {
  if (clusterTimer === null) {
    clusterTimer = setInterval(updateCluster, refreshSeconds * 1000);
    updateCluster();
  }
}

function stopCluster() {
  if (clusterTimer !== null) { clearInterval(clusterTimer); clusterTimer = null; }
}

async function updateCluster() {
  writeUrl();
  const text = $("proxies").value.trim();
  if (!text) {
    $("cluster-proxies").replaceChildren();
    setText("cluster-totals", "");
    showErrors(["proxies"], {}, "cluster-status");
    setText("cluster-status", "Give the addresses of running proxies; their GET /bloomwise/stats is shown here " +
      "and refreshed live.");
    return;
  }
  if (clusterBusy) return;
  clusterBusy = true;
  try {
    const answer = await getJson("/api/cluster?" + new URLSearchParams({proxies: text}).toString());
    if (!answer.ok) {
      showErrors(["proxies"], answer.body.fields || {proxies: answer.body.error}, "cluster-status-unused");
      return;
    }
    showErrors(["proxies"], {}, "cluster-status-unused");
    renderCluster(answer.body.proxies);
    const t = answer.body.totals;
    setText("cluster-status", `${t.answered} of ${t.proxies} proxies answered; updated ` +
      `${new Date().toLocaleTimeString("en-GB")}, every ${refreshSeconds} s.`);
    setText("cluster-totals", `Cluster: ${fmtInt(t.requests)} requests, hit ratio ${percent(t.hit_ratio)} ` +
      `(${fmtInt(t.local_hits)} local, ${fmtInt(t.remote_hits)} remote hits), ${fmtInt(t.origin_fetches)} origin ` +
      `fetches; ${fmtInt(t.false_hits)} false hits in ${fmtInt(t.peer_queries)} peer queries ` +
      `(${percent(t.false_hit_ratio)}), ${fmtInt(t.false_misses)} false misses; summaries ` +
      `${fmtInt(t.summary_bytes_out)} bytes out.`);
    $("cluster-totals").dataset.requests = String(t.requests);
  } catch (error) {
    setText("cluster-status", "the page's server did not answer: " + error.message);
  } finally {
    clusterBusy = false;
  }
}

function percent(x) {
  return x == null ? "n/a" : (100 * x).toFixed(1) + "%";
}

const PROXY_FIELDS = [
  ["requests", "requests", fmtInt], ["hit_ratio", "hit ratio", percent],
  ["local_hits", "local hits", fmtInt], ["remote_hits", "remote hits", fmtInt],
  ["false_hits", "false hits", fmtInt], ["false_misses", "false misses", fmtInt],
  ["peer_queries", "peer queries", fmtInt], ["origin_fetches", "origin fetches", fmtInt],
  ["peer_queries_served", "peer queries served", fmtInt],
  ["summary_bytes_out", "summary bytes out", fmtInt], ["summary_bytes_in", "summary bytes in", fmtInt],
  ["uptime_seconds", "uptime (s)", (x) => x == null ? "n/a" : x.toFixed(0)],
  ["cache_documents", "documents cached", fmtInt],
  ["cache_used_bytes", "cache bytes used", fmtInt],
  ["summary_version", "own summary version", fmtInt],
];
const PEER_FIELDS = [
  ["summary_version", "summary version", fmtInt], ["summary_age_seconds", "summary age (s)", (x) => fmt(x, 3)],
  ["summary_bytes", "summary bytes", fmtInt], ["rtt_ms", "RTT (ms)", (x) => fmt(x, 3)],
  ["cost", "cost", (x) => fmt(x, 3)], ["healthy", "healthy", (x) => x == null ? "n/a" : x ? "yes" : "no"],
  ["failures", "failures", fmtInt],
];

function renderCluster(proxies) {
  const cards = proxies.map((proxy) => {
    const card = document.createElement("article");
    card.className = "card proxy " + (proxy.ok ? "up" : "down");
    card.dataset.address = proxy.address;
    const title = document.createElement("h3");
    const stats = proxy.stats || {};
    title.textContent = (stats.name ? stats.name + " \u2014 " : "") + proxy.address;
    if (stats.policy || stats.summary_kind) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = [stats.policy && "policy " + stats.policy, stats.summary_kind && stats.summary_kind + " summaries"]
        .filter(Boolean).join(", ");
      title.appendChild(badge);
    }
    card.appendChild(title);
    if (!proxy.ok) {
      const error = document.createElement("p");
      error.className = "error";
      error.textContent = proxy.error;
      card.appendChild(error);
      return card;
    }
    const list = document.createElement("dl");
    list.className = "stats";
    for (const [key, label, format] of PROXY_FIELDS) {
      const item = document.createElement("div");
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = label;
      dd.textContent = format(stats[key]);
      dd.dataset.field = key;
      item.append(dt, dd);
      list.appendChild(item);
    }
    card.appendChild(list);
    if (stats.peers && stats.peers.length) {
      const table = document.createElement("table");
      table.className = "numbers peers";
      const head = table.createTHead();
      head.appendChild(tableRow(["peer", ...PEER_FIELDS.map((field) => field[1])]));
      table.createTBody();
      for (const peer of stats.peers) {
        const row = tableRow([peer.peer.replace(/^https?:\/\//, ""), ...PEER_FIELDS.map(([key, , format]) => format(peer[key]))],
                             peer.healthy === false ? "unhealthy" : "", "peer-" + peer.peer);
        if (peer.last_error) row.title = "last error: " + peer.last_error;
        table.tBodies[0].appendChild(row);
      }
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      wrap.appendChild(table);
      card.appendChild(wrap);
    }
    if (stats.problems && stats.problems.length) {
      const note = document.createElement("p");
      note.className = "note";
      note.textContent = "ignored: " + stats.problems.join("; ");
      card.appendChild(note);
    }
    const timing = document.createElement("p");
    timing.className = "note";
    timing.textContent = `answered in ${fmt(proxy.elapsed_ms, 3)} ms`;
    card.appendChild(timing);
    return card;
  });
  $("cluster-proxies").replaceChildren(...cards);
}

// ---- start ----
async function main() {
  const params = readUrl();
  const planGiven = PLAN_FIELDS.some((name) => params.has(name));
  for (const name of PLAN_FIELDS) {
    const value = params.get(name) ?? (planGiven ? "" : (PLAN_DEFAULTS[name] ?? ""));
    if (name === "layout") $(name).value = value || DEFAULT_LAYOUT; else $(name).value = value;
  }
  for (const name of PARADOX_FIELDS) $(name).value = params.get(name) ?? PARADOX_DEFAULTS[name];
  if (!$("cbits").value) $("cbits").value = PARADOX_DEFAULTS.cbits;  // a width the list does not offer
  try {
    const config = await getJson("/api/config");
    if (config.ok) {
      refreshSeconds = config.body.refresh_seconds;
      $("proxies").value = params.get("proxies") ?? config.body.proxies.join(", ");
    }
  } catch (error) { /* the fields still work */ }
  if (params.has("proxies")) $("proxies").value = params.get("proxies");

  const planChanged = debounce(updatePlan, 250);
  for (const name of PLAN_FIELDS) $(name).addEventListener("input", planChanged);
  $("layout").addEventListener("change", updatePlan);
  $("plan-clear").addEventListener("click", () => {
    for (const name of ["n", "p", "m", "k"]) { $(name).value = ""; $(name).placeholder = ""; }
    updatePlan();
  });
  const paradoxChanged = debounce(updateParadox, 250);
  for (const name of PARADOX_FIELDS) $(name).addEventListener("input", paradoxChanged);
  $("cbits").addEventListener("change", updateParadox);
  $("proxies").addEventListener("input", debounce(updateCluster, 400));
  for (const form of ["plan-form", "paradox-form", "cluster-form"]) {
    $(form).addEventListener("submit", (event) => event.preventDefault());
  }
  window.addEventListener("hashchange", () => showView(window.location.hash.slice(1)));
  showView(window.location.hash.slice(1));
  await Promise.all([updatePlan(), updateParadox()]);
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", main);
