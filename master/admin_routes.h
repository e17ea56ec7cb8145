#pragma once

// The master's REST admin routes. Handlers only translate HTTP to
// MasterService calls and results to JSON; every rule lives in the service.
//
//   GET /livez        200 {"status":"ok","role":"master"} whenever the process serves HTTP
//   GET /readyz       200 {"status":"ok","ready":true,"role":"master","keys":N,"nodes_alive":N,
//                       "nodes_dead":N,"degraded":bool,"reasons":["node w1 is dead ..."]}
//                     The master is ready once it serves (the admin server starts after the
//                     RPC server), so this is always 200: a dead node does not stop the
//                     master from serving the others. Each dead node is one entry in
//                     "reasons" and sets "degraded":true.
//   GET /health       alias of /readyz (same status code and body)
//   GET /version      {"version","commit","build_type","gpu":bool,"rdma":bool}
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
