#include "http/status_page.h"

#include <memory>
#include <string>

namespace mooncake {
namespace {

// Everything the browser may do: run this page's inline script and style and
// fetch its own origin's JSON. No image, font, frame or form target.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

constexpr std::string_view kRolePlaceholder = "@ROLE@";

// The document. The script builds every element with textContent (node ids
// and tier names come from the network and are never parsed as HTML).
constexpr std::string_view kPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Mooncake @ROLE@</title>
<style>
:root {
  --bg: #f5f6f8; --card: #fff; --fg: #1c2430; --muted: #5d6b7e; --line: #dde2e8;
  --ok: #1f8a4c; --warn: #c77700; --bad: #c62828; --bar: #2f6fdb; --track: #e7ebf0;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #12161c; --card: #1b2129; --fg: #e4e9ef; --muted: #9aa7b6; --line: #2c3540;
    --track: #2a323d; --bar: #4f8df0;
  }
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
}
header {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: 6px 14px;
  padding: 12px 16px; background: var(--card); border-bottom: 1px solid var(--line);
}
header h1 { margin: 0; font-size: 18px; }
header .meta { color: var(--muted); font-size: 12px; }
main { padding: 12px 16px 24px; max-width: 1400px; margin: 0 auto; }
h2 { font-size: 15px; margin: 18px 0 8px; }
.banner {
  display: none; margin: 0 0 12px; padding: 8px 12px; border-radius: 6px;
  background: #fdecea; color: #8a1c1c; border: 1px solid #f5c2c0;
}
.banner.show { display: block; }
.pill {
  display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; color: #fff; background: var(--muted);
}
.pill.ok { background: var(--ok); } .pill.warn { background: var(--warn); }
.pill.bad { background: var(--bad); }
.stats {
  display: grid; grid-template-columns: repeat(auto-fill, minmax(120px, 1fr)); gap: 8px;
}
.stat {
  background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px;
}
.stat .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat .l { color: var(--muted); font-size: 12px; }
.nodes {
  display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 12px;
}
.node {
  background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px;
  min-width: 0;
}
.node.dead { border-color: var(--bad); }
.node h3 {
  margin: 0; font-size: 15px; display: flex; gap: 8px; align-items: center; flex-wrap: wrap;
  overflow-wrap: anywhere;
}
.node .addr { color: var(--muted); font-size: 12px; margin: 2px 0 8px; overflow-wrap: anywhere; }
.tier { margin: 8px 0; }
.tier .row { display: flex; justify-content: space-between; gap: 8px; font-size: 13px; }
.tier .row .num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.bar { height: 10px; background: var(--track); border-radius: 5px; overflow: hidden; margin: 3px 0; }
.bar > span { display: block; height: 100%; background: var(--bar); min-width: 1px; }
.bar.warn > span { background: var(--warn); } .bar.bad > span { background: var(--bad); }
.small { color: var(--muted); font-size: 12px; }
dl.counters {
  display: grid; grid-template-columns: repeat(auto-fill, minmax(95px, 1fr)); gap: 2px 10px;
  margin: 8px 0 0; font-size: 12px;
}
dl.counters div { display: flex; justify-content: space-between; gap: 4px; }
dl.counters dt { color: var(--muted); }
dl.counters dd { margin: 0; font-variant-numeric: tabular-nums; }
.tablewrap { overflow-x: auto; background: var(--card); border: 1px solid var(--line);
  border-radius: 8px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 5px 10px; text-align: right; white-space: nowrap; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; }
th { color: var(--muted); font-weight: 600; }
tr:last-child td { border-bottom: 0; }
ul.reasons { margin: 4px 0 0 18px; padding: 0; }
@media (max-width: 480px) {
  main { padding: 8px 8px 20px; }
  header { padding: 10px 8px; }
  .nodes { grid-template-columns: 1fr; }
  .stats { grid-template-columns: repeat(2, 1fr); }
}
</style>
</head>
<body data-role="@ROLE@" data-loaded="0">
<header>
  <h1 id="title">Mooncake @ROLE@</h1>
  <span id="health" class="pill">loading</span>
  <span class="meta" id="meta"></span>
</header>
<main>
  <div id="banner" class="banner" role="alert"></div>
  <section id="summary" aria-label="summary"></section>
  <section id="readiness"></section>
  <h2 id="nodes-title">Nodes</h2>
  <div id="nodes" class="nodes"></div>
  <h2 id="latency-title">Request latency</h2>
  <div id="latency" class="tablewrap"></div>
  <p class="small" id="footer"></p>
</main>
<script>
"use strict";
const ROLE = document.body.dataset.role;
const REFRESH_MS = 3000;

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0; n = Number(n) || 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
}
function fmtCount(n) {
  n = Number(n) || 0;
  if (n < 100000) return n.toLocaleString("en-US");
  const units = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [d, s] of units) if (n >= d) return (n / d).toFixed(n / d >= 100 ? 0 : 1) + s;
  return String(n);
}
function fmtMs(ms) {
  ms = Number(ms) || 0;
  if (ms === 0) return "0";
  if (ms < 1) return (ms * 1000).toFixed(0) + " \u00b5s";
  if (ms < 100) return ms.toFixed(2) + " ms";
  return ms.toFixed(0) + " ms";
}
function fmtAge(ms) {
  if (ms < 0) return "never";
  return ms < 10000 ? (ms / 1000).toFixed(1) + " s ago" : Math.round(ms / 1000) + " s ago";
}
function sum(list, f) { return list.reduce((a, x) => a + (Number(f(x)) || 0), 0); }

async function getJson(path) {
  let r;
  try {
    r = await fetch(path, {cache: "no-store"});
  } catch (e) {
    throw new Error(path + ": " + e.message);
  }
  let body;
  try { body = await r.json(); } catch (e) { throw new Error(path + ": HTTP " + r.status); }
  // /readyz answers 503 with a JSON body when not ready: that is data.
  if (!r.ok && !(path === "/readyz" && r.status === 503)) {
    throw new Error(path + ": HTTP " + r.status + " " + (body.error || ""));
  }
  return body;
}

function stat(key, label, value, fmt, hint) {
  return h("div", {class: "stat", "data-stat": key, "data-value": value},
           h("div", {class: "v"}, (fmt || fmtCount)(value)),
           h("div", {class: "l"}, label, hint ? " \u00b7 " + hint : ""));
}

function setHealth(text, cls) {
  const e = document.getElementById("health");
  e.textContent = text;
  e.className = "pill " + cls;
}

// One tier: used/capacity bar and, when known, its counters.
function tierView(nodeId, usage, counters) {
  const cap = Number(usage.capacity) || 0, used = Number(usage.used) || 0;
  const pct = cap > 0 ? Math.min(100, used / cap * 100) : 0;
  const bar = h("div", {class: "bar" + (pct >= 90 ? " bad" : pct >= 75 ? " warn" : ""),
                        role: "meter", "aria-valuemin": 0, "aria-valuemax": cap,
                        "aria-valuenow": used, "aria-label": usage.name + " used"}, h("span"));
  bar.firstChild.style.width = pct.toFixed(2) + "%";
  const c = counters || {};
  const attrs = {class: "tier", "data-node": nodeId, "data-tier": usage.name,
                 "data-kind": usage.kind, "data-used": used, "data-capacity": cap,
                 "data-objects": usage.objects};
  if (counters) {
    Object.assign(attrs, {"data-hits": c.hits, "data-promotions": c.promotions_in,
                          "data-demotions": c.demotions_out, "data-evictions": c.evictions});
  }
  return h("div", attrs,
    h("div", {class: "row"},
      h("span", {}, h("b", {}, usage.name), " ", h("span", {class: "small"}, usage.kind)),
      h("span", {class: "num"}, fmtBytes(used) + " / " + fmtBytes(cap) + " (" +
        pct.toFixed(pct < 10 ? 1 : 0) + "%)")),
    bar,
    h("div", {class: "small"}, fmtCount(usage.objects) + " objects",
      counters ? " \u00b7 hits " + fmtCount(c.hits) + " \u00b7 promoted in " +
                 fmtCount(c.promotions_in) + " \u00b7 demoted out " + fmtCount(c.demotions_out) +
                 " \u00b7 evicted " + fmtCount(c.evictions) : ""));
}

function countersView(t) {
  const rows = [["gets", "gets"], ["get misses", "get_misses"], ["puts", "puts"],
                ["upserts", "upserts"], ["removes", "removes"], ["dropped", "dropped"],
                ["prefetched", "prefetch_succeeded"], ["prefetch fails", "prefetch_failed"],
                ["moved in", "moved_in"], ["moved out", "moved_out"]];
  return h("dl", {class: "counters"}, rows.map(([label, key]) =>
    h("div", {"data-stat": key, "data-value": t[key]}, h("dt", {}, label),
      h("dd", {}, fmtCount(t[key])))));
}

// A node card. `usageTiers`: [{name, kind, capacity, used, objects}];
// `stats`: the worker's /stats shape (tiers with counters, totals) or null.
function nodeView(node, usageTiers, stats, statsError) {
  const byName = {};
  for (const t of (stats && stats.tiers) || []) byName[t.name] = t;
  const alive = node.alive !== false;
  const extra = [];
  if (node.address) extra.push(node.address);
  if (node.heartbeat_age_ms !== undefined) extra.push("heartbeat " + fmtAge(node.heartbeat_age_ms));
  return h("section", {class: "node" + (alive ? "" : " dead"), "data-node": node.node_id,
                       "data-alive": alive},
    h("h3", {}, node.node_id, h("span", {class: "pill " + (alive ? "ok" : "bad")},
                                alive ? "alive" : "dead")),
    h("div", {class: "addr"}, extra.join(" \u00b7 ")),
    usageTiers.length ? usageTiers.map(t => tierView(node.node_id, t, byName[t.name] || null))
                      : h("div", {class: "small"}, "no tiers reported"),
    stats ? countersView(stats.totals || {})
          : h("div", {class: "small"}, statsError ? "counters unavailable: " + statsError : ""));
}

function latencyView(scope, requests) {
  const ops = Object.entries(requests || {}).filter(([, r]) => r.requests > 0);
  if (!ops.length) return h("p", {class: "small", style: "padding:8px 10px;margin:0"},
                            "no requests yet");
  return h("table", {"data-scope": scope},
    h("thead", {}, h("tr", {}, ["operation", "requests", "errors", "p50", "p90", "p99", "mean"]
      .map(x => h("th", {scope: "col"}, x)))),
    h("tbody", {}, ops.map(([op, r]) =>
      h("tr", {"data-op": op, "data-requests": r.requests, "data-errors": r.errors,
               "data-p50-ms": r.p50_ms, "data-p90-ms": r.p90_ms, "data-p99-ms": r.p99_ms},
        h("td", {}, op), h("td", {}, fmtCount(r.requests)), h("td", {}, fmtCount(r.errors)),
        h("td", {}, fmtMs(r.p50_ms)), h("td", {}, fmtMs(r.p90_ms)), h("td", {}, fmtMs(r.p99_ms)),
        h("td", {}, fmtMs(r.mean_ms))))));
}

// Cluster-wide counters summed over the workers whose stats arrived.
function clusterTotals(statsList) {
  const tiers = statsList.flatMap(s => s.tiers || []);
  const t = k => sum(statsList, s => (s.totals || {})[k]);
  return {hits: sum(tiers, x => x.hits), promotions: sum(tiers, x => x.promotions_in),
          demotions: sum(tiers, x => x.demotions_out), evictions: sum(tiers, x => x.evictions),
          gets: t("gets"), get_misses: t("get_misses"), puts: t("puts") + t("upserts"),
          prefetches: t("prefetch_succeeded"), prefetch_started: t("prefetch_started"),
          moved_in: t("moved_in"), moved_out: t("moved_out"), dropped: t("dropped")};
}

function countersTiles(c, extraHint) {
  return [
    stat("gets", "gets", c.gets, null, extraHint),
    stat("hits", "hits", c.hits),
    stat("puts", "puts", c.puts),
    stat("promotions", "promotions", c.promotions),
    stat("demotions", "demotions", c.demotions),
    stat("evictions", "evictions", c.evictions),
    stat("prefetches", "prefetches", c.prefetches, null, fmtCount(c.prefetch_started) + " started"),
    stat("moved_in", "moved in", c.moved_in, null, "from other nodes"),
    stat("moved_out", "moved out", c.moved_out, null, "to other nodes"),
    stat("dropped", "dropped", c.dropped)];
}

function replace(id, ...kids) { document.getElementById(id).replaceChildren(...kids.flat()); }

async function refreshMaster() {
  const [version, nodesDoc, stats, cluster] = await Promise.all(
      [getJson("/version"), getJson("/nodes"), getJson("/stats"), getJson("/cluster/stats")]);
  const nodes = nodesDoc.nodes || [];
  const byNode = {};
  for (const n of cluster.nodes || []) byNode[n.node_id] = n;
  const now = Date.now();
  const alive = nodes.filter(n => n.alive).length, dead = nodes.length - alive;
  const okStats = (cluster.nodes || []).filter(n => n.ok);
  const c = clusterTotals(okStats);
  replace("summary", h("div", {class: "stats"},
    stat("nodes_alive", "nodes alive", alive, null, dead ? dead + " dead" : "none dead"),
    stat("keys", "keys", stats.keys),
    countersTiles(c, fmtCount(stats.get_misses) + " missed at master")));
  replace("nodes", nodes.length ? nodes.map(n => {
    const s = byNode[n.node_id];
    const age = n.heartbeat_age_ms ?? Math.max(0, now - n.last_heartbeat_ms);
    const view = Object.assign({}, n, {heartbeat_age_ms: age});
    return nodeView(view, n.tiers || [], s && s.ok ? s : null,
                    s ? s.error : (n.alive ? "not queried" : "node is dead"));
  }) : h("p", {class: "small"}, "no worker has registered yet"));
  document.getElementById("latency-title").textContent = "Master request latency";
  replace("latency", latencyView("master", stats.requests));
  setHealth(dead ? "degraded: " + dead + " dead" : "ok", dead ? "warn" : "ok");
  return version;
}

async function refreshWorker() {
  const [version, ready, stats] = await Promise.all(
      [getJson("/version"), getJson("/readyz"), getJson("/stats")]);
  document.getElementById("title").textContent = "Mooncake worker " + stats.node_id;
  document.title = "Mooncake worker " + stats.node_id;
  const tiers = stats.tiers || [];
  const c = clusterTotals([stats]);
  const tr = stats.transport;
  replace("summary", h("div", {class: "stats"}, countersTiles(c),
    tr ? stat("peer_bytes", "sent to peers", (tr.tcp_bytes || 0) + (tr.rdma_bytes || 0), fmtBytes,
              tr.rdma_enabled ? "RDMA on" : "TCP") : null));
  const lines = [];
  if (ready.master) {
    lines.push("master " + ready.master + " \u00b7 " +
               (ready.registered ? "registered" : "not registered") + " \u00b7 heartbeat " +
               fmtAge(ready.heartbeat_age_ms));
  }
  replace("readiness", h("h2", {}, "Liveness"),
    h("div", {class: "node", "data-ready": ready.ready},
      h("h3", {}, h("span", {class: "pill " + (ready.ready ? "ok" : "bad")},
                    ready.ready ? "ready" : "not ready"),
        h("span", {class: "small"}, lines.join(""))),
      (ready.reasons || []).length
          ? h("ul", {class: "reasons"}, ready.reasons.map(r => h("li", {}, r))) : null));
  document.getElementById("nodes-title").textContent = "Tiers";
  replace("nodes", nodeView({node_id: stats.node_id, alive: true,
                             address: tiers.length + " tiers"}, tiers, stats, null));
  replace("latency", latencyView("worker", stats.requests));
  setHealth(ready.ready ? "ready" : "not ready", ready.ready ? "ok" : "bad");
  return version;
}

async function refresh() {
  const banner = document.getElementById("banner");
  try {
    const version = await (ROLE === "master" ? refreshMaster() : refreshWorker());
    document.body.dataset.loaded = Number(document.body.dataset.loaded) + 1;
    delete document.body.dataset.error;
    banner.className = "banner";
    document.getElementById("meta").textContent =
        "v" + version.version + " (" + version.commit + ") \u00b7 updated " +
        new Date().toLocaleTimeString() + " \u00b7 refreshes every " + REFRESH_MS / 1000 + " s";
  } catch (e) {
    document.body.dataset.error = e.message;
    banner.textContent = "Cannot refresh (showing the last data): " + e.message;
    banner.className = "banner show";
    setHealth("unreachable", "bad");
  }
  setTimeout(refresh, REFRESH_MS);
}
document.getElementById("footer").textContent = ROLE === "master"
    ? "Tier usage comes from the workers' heartbeats; counters from each alive worker's " +
      "Stats RPC (via /cluster/stats). Each worker's own page (GET / on its admin port) " +
      "adds its request latency. JSON: /nodes, /stats, /cluster/stats; Prometheus: /metrics."
    : "JSON: /stats, /readyz; Prometheus: /metrics.";
refresh();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string StatusPageHtml(std::string_view role) {
  std::string page(kPage);
  for (size_t pos = page.find(kRolePlaceholder); pos != std::string::npos;
       pos = page.find(kRolePlaceholder, pos + role.size())) {
    page.replace(pos, kRolePlaceholder.size(), role);
  }
  return page;
}

void RegisterStatusPage(AdminServer& server, std::string_view role) {
  auto page = std::make_shared<const std::string>(StatusPageHtml(role));
  server.Route("GET", "/", [page](const HttpRequest&) {
    HttpResponse out = HttpResponse::Text(200, *page, "text/html; charset=utf-8");
    out.headers.emplace_back("Content-Security-Policy", std::string(kContentSecurityPolicy));
    out.headers.emplace_back("Cache-Control", "no-store");
    out.headers.emplace_back("X-Content-Type-Options", "nosniff");
    return out;
  });
}

}  // namespace mooncake
