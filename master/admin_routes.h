#pragma once

// The master's REST admin routes. Handlers only translate HTTP to
// MasterService calls and results to JSON; every rule lives in the service.
//
//   GET /livez        200 {"status":"ok","role":"master"} whenever the process serves HTTP
//   GET /readyz       200 {"status":"ok","ready":true,"role":"master","ha_role","leader",
//                       "keys":N,"nodes_alive":N,"nodes_dead":N,"degraded":bool,
//                       "reasons":["node w1 is dead ..."]}
//                     Ready while this master serves key calls: past its --rebuild-ms
//                     window after the start (and, with HA, after its election); a dead node
//                     does not stop the master from serving the others (one entry in
//                     "reasons" each, and "degraded":true). "ha_role": "standalone" (no
//                     --etcd), "leader", "rebuilding" (inside --rebuild-ms) or "standby";
//                     "leader": the HA leader's RPC address, or null when unknown or
//                     standalone. A standby or a rebuilding master answers key calls
//                     NOT_LEADER, so it answers 503 "status":"unavailable","ready":false
//                     with that as a reason (a standby that cannot campaign adds etcd's
//                     answer).
//   GET /health       alias of /readyz (same status code and body)
//   GET /version      {"version","commit","build_type","gpu":bool,"rdma":bool}
//   GET /nodes        {"nodes":[{"node_id","address":"host:port","host","port","alive",
//                       "state":"alive"|"dead","last_heartbeat_ms","heartbeat_age_ms","free_bytes",
//                       "tiers":[{"name","kind","capacity","used","objects"}]}]}
//   DELETE /nodes/{id}
//                     (admin token) forgets a dead node at once: 200 {"node_id","forgotten":true};
//                     409 NODE_ALIVE for a live node (left as it is), 404 NODE_NOT_FOUND for
//                     an unknown one. Dead nodes are also forgotten on their own after
//                     MasterOptions::forget_dead_after (1 h by default).
//   GET /keys/{key}   {"key","node_id","address","host","port"}; 404 OBJECT_NOT_FOUND,
//                     400 INVALID_KEY (a key with '/' is sent as %2F). Both /keys routes
//                     answer 503 NOT_LEADER while this master does not serve key calls (a
//                     standby, or inside its rebuild window), as its Thrift key calls do:
//                     its directory is empty or partial then, and "no owner" would be false.
//   GET /keys?prefix=&limit=&cursor=
//                     {"keys":[...sorted...],"count":N,"next_cursor":"<opaque>"|null};
//                     limit 1..10000 (default 100); pass next_cursor back as
//                     cursor (URL-encoded) for the next page; null means no more
//                     keys. The cursor is the page's last key with '%', controls,
//                     space and non-ASCII bytes as %XX (lossless, unlike the key
//                     in JSON, where bytes that are not UTF-8 read as U+FFFD).
//   GET /             the status page (http/status_page.h, docs/status-page.md): HTML that
//                     refreshes itself from /nodes, /stats and /cluster/stats
//   GET /stats        {"role":"master","keys":N,"nodes_alive":N,"nodes_dead":N,"get_misses":N,
//                       "requests":{"<op>":{"requests","errors","codes":{"OK":n,..},"p50_ms",
//                       "p90_ms","p99_ms","p999_ms","mean_ms"}}}: the master's own RPCs
//                     ("requests" is {} when no RequestMetrics is given); get_misses:
//                     keys looked up with no owner (get_location OBJECT_NOT_FOUND answers
//                     and absent keys of batch_get_location: client gets, exists, removes
//                     and inspects alike, which the RPC does not tell apart)
//   GET /cluster/stats
//                     {"nodes":[{"node_id","address","ok":bool,"error":"<why>"|null,
//                       "tiers":[{"name","kind","capacity","used","objects","hits",
//                       "promotions_in","demotions_out","evictions"}],
//                       "totals":{"gets","get_misses","puts","upserts","removes","dropped",
//                       "prefetch_started","prefetch_succeeded","prefetch_failed",
//                       "prefetch_skipped","moved_in","moved_out"},"pinned_bytes"}],
//                      "age_ms":N}
//                     Each alive node's counters, asked of the worker over its Stats RPC
//                     (TLS as the master's own RPC when set). Bounded: every alive node
//                     (at most 64) in parallel, 300 ms to connect and 1 s per call (a
//                     pooled connection that fails is retried once on a fresh one, so a
//                     frozen worker costs at most ~2.6 s); one collection at a time, and an answer
//                     younger than 1 s is reused, so any number of open pages costs each worker at
//                     most one Stats call per second. A request that arrives while a
//                     collection runs does not wait for it: it gets the last answer, however
//                     old ("age_ms" says), or before the first one every node "ok":false,
//                     "error":"a collection ... is in progress". A dead, unreachable or slow
//                     worker is "ok":false with its reason; tiers and totals are then absent.
//   GET /metrics      Prometheus text: keys, nodes by state, per-node tier
//                     capacity/used/objects, node up, and request counters and
//                     latency histograms when `requests` is given, and the
//                     RPC server's mooncake_rpc_* families when `rpc` is;
//                     mooncake_master_is_leader (1 when serving key calls) and
//                     mooncake_master_ha_role{role=...} (1 for the current role).

#include "common/metrics.h"
#include "http/admin_server.h"
#include "http/prometheus_writer.h"
#include "master/master_service.h"
#include "thrift/rpc_tls.h"

namespace mooncake {

class RoleGate;

// Registers the routes above on `server` (before it starts). `service` and
// `requests` (may be null) must outlive the server. `worker_tls`: the TLS
// settings /cluster/stats calls workers with (the master's own; empty: TCP).
// `gate` (may be null: no HA) gives /readyz and /metrics this master's HA
// role; it must outlive the server.
void RegisterMasterAdminRoutes(AdminServer& server, MasterService& service,
                               const RequestMetrics* requests = nullptr, RpcStatsFn rpc = {},
                               TlsSettings worker_tls = {}, const RoleGate* gate = nullptr);

}  // namespace mooncake
