#pragma once

// The master's REST admin routes. Handlers only translate HTTP to
// MasterService calls and results to JSON; every rule lives in the service.
//
//   GET /health       {"status":"ok","role":"master","keys":N,"nodes_alive":N,"nodes_dead":N}
//   GET /nodes        {"nodes":[{"node_id","address":"host:port","host","port","alive",
//                       "state":"alive"|"dead","last_heartbeat_ms","free_bytes",
//                       "tiers":[{"name","kind","capacity","used","objects"}]}]}
//   GET /keys/{key}   {"key","node_id","address","host","port"}; 404 OBJECT_NOT_FOUND,
//                     400 INVALID_KEY (a key with '/' is sent as %2F)
//   GET /keys?prefix=&limit=&cursor=
//                     {"keys":[...sorted...],"count":N,"next_cursor":"<key>"|null};
//                     limit 1..10000 (default 100); pass next_cursor back as
//                     cursor for the next page; null means no more keys.
//   GET /metrics      Prometheus text: keys, nodes by state, per-node tier
//                     capacity/used/objects, node up, and request counters and
//                     latency histograms when `requests` is given, and the
//                     RPC server's mooncake_rpc_* families when `rpc` is.

#include "common/metrics.h"
#include "http/admin_server.h"
#include "http/prometheus_writer.h"
#include "master/master_service.h"

namespace mooncake {

// Registers the routes above on `server` (before it starts). `service` and
// `requests` (may be null) must outlive the server.
void RegisterMasterAdminRoutes(AdminServer& server, const MasterService& service,
                               const RequestMetrics* requests = nullptr, RpcStatsFn rpc = {});

}  // namespace mooncake
