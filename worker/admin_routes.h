#pragma once

// The worker's REST admin routes. Handlers only translate HTTP to
// TieredCacheBackend calls and results to JSON; every rule lives in the
// backend.
//
//   GET    /livez           200 {"status":"ok","role":"worker"} whenever the process serves HTTP
//   GET    /readyz          200 {"status":"ok","ready":true,"role":"worker","node_id","objects":N,
//                             "tiers":N,"registered","heartbeat_age_ms","heartbeat_stale_ms",
//                             "master","reasons":[]}
//                           503 the same with "status":"unavailable","ready":false and one
//                             reason per failed check: not registered with the master yet,
//                             no successful heartbeat within heartbeat_stale_ms (3 heartbeat
//                             intervals, at least 1 s: the master is down or unreachable,
//                             or forgot this node), no tier open. Without a readiness
//                             callback only the tier check applies.
//   GET    /health          alias of /readyz (same status code and body)
//   GET    /version         {"version","commit","build_type","gpu":bool,"rdma":bool}
//   GET    /                the node's status page (http/status_page.h, docs/status-page.md):
//                           HTML that refreshes itself from /version, /readyz and /stats
//   GET    /stats           {"node_id","tiers":[{"name","kind","capacity","used","objects",
//                             "hits","promotions_in","demotions_out","evictions",
//                             "pinned_bytes"}],
//                            "totals":{"gets","get_misses","puts","upserts","removes","dropped",
//                             "prefetch_started","prefetch_succeeded","prefetch_failed",
//                             "prefetch_skipped","moved_in","moved_out"},
//                            "requests":{"<op>":{"requests","errors","codes":{"OK":n,..},
//                             "p50_ms","p90_ms","p99_ms","p999_ms","mean_ms"}},
//                            "transport":{"rdma_enabled","rdma_reason","rdma_objects",
//                             "rdma_bytes","tcp_objects","tcp_bytes","rdma_fallbacks"}}
//   GET    /objects/{key}   {"key","tier","offset","size","version","hard_pinned",
//                            "soft_pinned","state","readers","lease_remaining_ms","idle_ms"}
//                            404 OBJECT_NOT_FOUND, 400 INVALID_KEY
//   DELETE /objects/{key}?force=true|false
//                           {"key","removed":true}; 409 OBJECT_HAS_LEASE without force
//   POST   /evict           body {"tier":"dram","target_ratio":0.5} ->
//                           {"tier","target_ratio","bytes_freed","used"}; 400 for bad JSON, an
//                           unknown or repeated field, or a ratio outside [0, 1],
//                           404 TIER_NOT_FOUND
//   GET    /config          every WorkerConfig field under its flag name ("dram-capacity"),
//                           as in use: "master" is null with --etcd or --master-shards,
//                           "admin-port" is the bound port
//   GET    /metrics         Prometheus text (mooncake_worker_*)
//
// A key containing '/' is sent as %2F. Mutating routes need the admin token
// when the AdminServer has one.

#include <cstdint>
#include <functional>
#include <string>

#include "common/metrics.h"
#include "http/admin_server.h"
#include "http/prometheus_writer.h"
#include "worker/tiered_cache_backend.h"
#include "worker/worker_config.h"

namespace mooncake {

// How this worker moves objects to other nodes (inter-node moves).
struct TransportSnapshot {
  bool rdma_enabled = false;
  std::string rdma_reason;  // why RDMA is off, when it is
  uint64_t rdma_objects = 0;
  uint64_t rdma_bytes = 0;
  uint64_t tcp_objects = 0;
  uint64_t tcp_bytes = 0;
  uint64_t rdma_fallbacks = 0;  // RDMA tried, then sent over TCP
};
using TransportStatsFn = std::function<TransportSnapshot()>;

// The worker's link to the master, for /readyz (WorkerServer::readiness).
struct WorkerReadiness {
  bool registered = false;         // the first registration (with key announcement) succeeded
  int64_t heartbeat_age_ms = -1;   // since the last successful register/heartbeat; -1: none yet
  int64_t heartbeat_stale_ms = 0;  // an age above this is not ready
  std::string master;              // HOST:PORT, for the reasons
};
using ReadinessFn = std::function<WorkerReadiness()>;

// Registers the routes above on `server` (before it starts). `config` is
// copied: pass the effective one (node_id and port resolved). `backend` and
// `requests` must outlive the server; so must what `transport` reads (empty:
// no transport section) and `readiness` (empty: ready once tiers are open).
void RegisterWorkerAdminRoutes(AdminServer& server, TieredCacheBackend& backend,
                               const WorkerConfig& config, const RequestMetrics& requests,
                               TransportStatsFn transport = {}, RpcStatsFn rpc = {},
                               ReadinessFn readiness = {});

}  // namespace mooncake
