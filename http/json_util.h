#pragma once

// JSON helpers for the admin server (http/admin_server.cc) and the route
// files beside the services they expose (master/admin_routes.cc,
// worker/admin_routes.cc). Included by .cc files only: nlohmann/json is
// heavy, so no header includes this one.

#include <nlohmann/json.hpp>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "http/admin_server.h"

namespace mooncake {

// Serializes `value`. Keys are arbitrary bytes, not necessarily UTF-8:
// invalid sequences become U+FFFD instead of throwing.
inline std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline HttpResponse JsonResponse(const nlohmann::json& value, int status = 200) {
  return HttpResponse::Json(status, DumpJson(value));
}

// Per-operation request counts, answer codes and latency percentiles, as
// both services' /stats show them.
inline nlohmann::json RequestsJson(const RequestMetrics& metrics) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& op : metrics.Snapshot()) {
    nlohmann::json codes = nlohmann::json::object();
    for (const auto& [code, n] : op.codes) codes[std::string(ToString(code))] = n;
    out[op.op] = {{"requests", op.requests},
                  {"errors", op.errors},
                  {"codes", std::move(codes)},
                  {"p50_ms", op.latency.Percentile(0.50) * 1e3},
                  {"p90_ms", op.latency.Percentile(0.90) * 1e3},
                  {"p99_ms", op.latency.Percentile(0.99) * 1e3},
                  {"p999_ms", op.latency.Percentile(0.999) * 1e3},
                  {"mean_ms", op.latency.mean_seconds() * 1e3}};
  }
  return out;
}

// A worker's node-wide counters, as both admin servers show them. A template
// because the worker's BackendStats and the Stats RPC's WorkerStats (which
// the master gathers) carry the same fields under the same names.
template <typename Counters>
nlohmann::json WorkerTotalsJson(const Counters& s) {
  return {{"gets", s.gets},
          {"get_misses", s.get_misses},
          {"puts", s.puts},
          {"upserts", s.upserts},
          {"removes", s.removes},
          {"dropped", s.dropped},
          {"prefetch_started", s.prefetch_started},
          {"prefetch_succeeded", s.prefetch_succeeded},
          {"prefetch_failed", s.prefetch_failed},
          {"prefetch_skipped", s.prefetch_skipped},
          {"moved_in", s.moved_in},
          {"moved_out", s.moved_out}};
}

}  // namespace mooncake
