#include "worker/admin_routes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "http/json_util.h"
#include "http/process_metrics.h"
#include "http/process_routes.h"
#include "http/prometheus_writer.h"
#include "http/status_page.h"
#include "tiers/cache_tier.h"

namespace mooncake {
namespace {

using nlohmann::json;

// What a handler needs, shared by all the worker's routes.
struct WorkerRoutes {
  const AdminServer& server;  // for the bound admin port
  TieredCacheBackend& backend;
  const WorkerConfig config;
  const RequestMetrics& requests;
  const TransportStatsFn transport;
  const RpcStatsFn rpc;
  const ReadinessFn readiness;

  std::string NodeId() const {
    if (!config.node_id.empty()) return config.node_id;
    const std::string& host = config.advertise_host.empty() ? config.host : config.advertise_host;
    return host + ":" + std::to_string(config.port);
  }
};

json TierJson(const TierSnapshot& t) {
  return {{"name", t.name},
          {"kind", ToString(t.kind)},
          {"capacity", t.capacity},
          {"used", t.used},
          {"objects", t.objects},
          {"hits", t.hits},
          {"promotions_in", t.promotions_in},
          {"demotions_out", t.demotions_out},
          {"evictions", t.evictions},
          {"pinned_bytes", t.pinned_bytes}};
}

// /readyz and /health: 200 when every check passes, else 503 with one
// reason per failed check.
HttpResponse Readiness(const WorkerRoutes& r) {
  auto stats = r.backend.Stats();
  uint64_t objects = 0;
  for (const auto& t : stats.tiers) objects += t.objects;
  json reasons = json::array();
  if (stats.tiers.empty()) reasons.push_back("no tier is open");
  json body = {{"role", "worker"},
               {"node_id", r.NodeId()},
               {"objects", objects},
               {"tiers", stats.tiers.size()}};
  if (r.readiness) {
    WorkerReadiness link = r.readiness();
    if (!link.registered) {
      reasons.push_back("not registered with the master at " + link.master + " yet");
    } else if (link.heartbeat_age_ms < 0 || link.heartbeat_age_ms > link.heartbeat_stale_ms) {
      reasons.push_back("no successful heartbeat to the master at " + link.master + " for " +
                        std::to_string(link.heartbeat_age_ms) + " ms (stale after " +
                        std::to_string(link.heartbeat_stale_ms) + " ms)");
    }
    body["registered"] = link.registered;
    body["heartbeat_age_ms"] = link.heartbeat_age_ms;
    body["heartbeat_stale_ms"] = link.heartbeat_stale_ms;
    body["master"] = link.master;
  }
  const bool ready = reasons.empty();
  body["status"] = ready ? "ok" : "unavailable";
  body["ready"] = ready;
  body["reasons"] = std::move(reasons);
  return JsonResponse(body, ready ? 200 : 503);
}

HttpResponse Stats(const WorkerRoutes& r) {
  auto stats = r.backend.Stats();
  json tiers = json::array();
  for (const auto& t : stats.tiers) tiers.push_back(TierJson(t));
  json body = {{"node_id", r.NodeId()},
               {"tiers", std::move(tiers)},
               {"totals", WorkerTotalsJson(stats)},
               {"requests", RequestsJson(r.requests)}};
  if (r.transport) {
    TransportSnapshot t = r.transport();
    body["transport"] = {{"rdma_enabled", t.rdma_enabled},    {"rdma_reason", t.rdma_reason},
                         {"rdma_objects", t.rdma_objects},    {"rdma_bytes", t.rdma_bytes},
                         {"tcp_objects", t.tcp_objects},      {"tcp_bytes", t.tcp_bytes},
                         {"rdma_fallbacks", t.rdma_fallbacks}};
  }
  return JsonResponse(body);
}

HttpResponse InspectObject(const WorkerRoutes& r, const HttpRequest& req) {
  const std::string& key = *req.PathParam("key");
  if (auto valid = ValidateKey(key); !valid)
    return HttpResponse::Error(valid.error(), "invalid key");
  auto obj = r.backend.Inspect(key);
  if (!obj) return HttpResponse::Error(obj.error(), "cannot inspect key: " + key);
  return JsonResponse({{"key", key},
                       {"tier", obj->tier},
                       {"offset", obj->offset},
                       {"size", obj->size},
                       {"version", obj->version},
                       {"hard_pinned", obj->hard_pinned},
                       {"soft_pinned", obj->soft_pinned},
                       {"state", obj->state},
                       {"readers", obj->readers},
                       {"lease_remaining_ms", obj->lease_remaining_ms},
                       {"idle_ms", obj->idle_ms}});
}

// "true"/"1" or "false"/"0"; absent means false.
Result<bool> ParseBool(const std::string* text) {
  if (!text || *text == "false" || *text == "0") return false;
  if (*text == "true" || *text == "1") return true;
  return Err(ErrorCode::kInvalidParams);
}

HttpResponse RemoveObject(const WorkerRoutes& r, const HttpRequest& req) {
  const std::string& key = *req.PathParam("key");
  if (auto valid = ValidateKey(key); !valid)
    return HttpResponse::Error(valid.error(), "invalid key");
  auto force = ParseBool(req.Query("force"));
  if (!force) return HttpResponse::Error(force.error(), "force must be true or false");
  auto removed = r.backend.Remove(key, *force);
  if (!removed) {
    std::string why = removed.error() == ErrorCode::kObjectHasLease
                          ? "object is leased by a recent read; retry later or use force=true"
                          : "cannot remove key: " + key;
    return HttpResponse::Error(removed.error(), why);
  }
  return JsonResponse({{"key", key}, {"removed", true}});
}

struct EvictRequest {
  std::string tier;
  double target_ratio = 0;
};

// Parses `body` as JSON and sets *duplicate to the first name that appears
// twice in one object ("" when none). nlohmann keeps the last of repeated
// names; a body that names a field twice is ambiguous, so callers reject it.
json ParseJsonNotingDuplicates(const std::string& body, std::string* duplicate) {
  std::vector<std::vector<std::string>> open;  // names seen, per open object
  duplicate->clear();
  json::parser_callback_t note = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == json::parse_event_t::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == json::parse_event_t::key && !open.empty()) {
      auto& names = open.back();
      const auto& name = parsed.get_ref<const std::string&>();
      if (std::ranges::find(names, name) != names.end()) {
        if (duplicate->empty()) *duplicate = name;
      } else {
        names.push_back(name);
      }
    }
    return true;
  };
  return json::parse(body, note, /*allow_exceptions=*/false);
}

// Strict on purpose: a misspelt field ("ratio") is an error, not a no-op, and
// a repeated one is an error, not "the last one wins".
Result<EvictRequest> ParseEvictBody(const std::string& body, std::string* why) {
  std::string duplicate;
  json doc = ParseJsonNotingDuplicates(body, &duplicate);
  if (doc.is_discarded() || !doc.is_object()) {
    *why = "body must be a JSON object {\"tier\": NAME, \"target_ratio\": 0..1}";
    return Err(ErrorCode::kInvalidParams);
  }
  if (!duplicate.empty()) {
    *why = "duplicate field \"" + duplicate + "\": name each field once";
    return Err(ErrorCode::kInvalidParams);
  }
  for (const auto& [name, value] : doc.items()) {
    if (name != "tier" && name != "target_ratio") {
      *why = "unknown field \"" + name + "\"";
      return Err(ErrorCode::kInvalidParams);
    }
  }
  auto tier = doc.find("tier");
  auto ratio = doc.find("target_ratio");
  if (tier == doc.end() || !tier->is_string() || tier->get_ref<const std::string&>().empty()) {
    *why = "\"tier\" must be a non-empty string";
    return Err(ErrorCode::kInvalidParams);
  }
  if (ratio == doc.end() || !ratio->is_number() || !std::isfinite(ratio->get<double>()) ||
      ratio->get<double>() < 0 || ratio->get<double>() > 1) {
    *why = "\"target_ratio\" must be a number in [0, 1]";
    return Err(ErrorCode::kInvalidParams);
  }
  return EvictRequest{tier->get<std::string>(), ratio->get<double>()};
}

HttpResponse Evict(const WorkerRoutes& r, const HttpRequest& req) {
  std::string why;
  auto parsed = ParseEvictBody(req.body, &why);
  if (!parsed) return HttpResponse::Error(parsed.error(), why);
  auto freed = r.backend.EvictTier(parsed->tier, parsed->target_ratio);
  if (!freed) {
    return HttpResponse::Error(freed.error(), freed.error() == ErrorCode::kTierNotFound
                                                  ? "no tier named \"" + parsed->tier + "\""
                                                  : "eviction failed");
  }
  uint64_t used = 0;
  for (const auto& t : r.backend.Stats().tiers) {
    if (t.name == parsed->tier) used = t.used;
  }
  return JsonResponse({{"tier", parsed->tier},
                       {"target_ratio", parsed->target_ratio},
                       {"bytes_freed", *freed},
                       {"used", used}});
}

HttpResponse Config(const WorkerRoutes& r) {
  const WorkerConfig& c = r.config;
  return JsonResponse(
      {{"node-id", r.NodeId()},
       {"host", c.host},
       {"advertise-host", c.advertise_host.empty() ? c.host : c.advertise_host},
       {"port", c.port},
       // The one master in use; null with --etcd or --master-shards, whose
       // values follow.
       {"master", c.etcd.empty() && c.master_shards.empty() ? json(c.master) : json(nullptr)},
       {"etcd", c.etcd},
       {"cluster-name", c.cluster_name},
       {"master-shards", c.master_shards},
       {"dram-capacity", c.dram_capacity},
       {"dram-prefault", c.dram_prefault},
       {"dram-pin-for-vram", c.dram_pin_for_vram},
       {"ssd-capacity", c.ssd_capacity},
       {"ssd-path", c.ssd_path},
       {"high-watermark", c.high_watermark},
       {"low-watermark", c.low_watermark},
       {"heartbeat-interval-ms", c.heartbeat_interval_ms},
       {"promote-on-get", c.promote_on_get},
       {"allow-evict-soft-pinned", c.allow_evict_soft_pinned},
       {"kv-lease-ttl-ms", c.kv_lease_ttl_ms},
       {"soft-pin-ttl-ms", c.soft_pin_ttl_ms},
       {"put-start-discard-timeout-ms", c.put_start_discard_timeout_ms},
       {"hard-pin-write-through", c.hard_pin_write_through},
       {"inter-node-eviction", c.inter_node_eviction},
       {"adopt-confirm-delay-ms", c.adopt_confirm_delay_ms},
       {"rdma", c.rdma},
       {"rdma-device", c.rdma_device},
       {"rdma-port", c.rdma_port},
       {"rdma-gid-index", c.rdma_gid_index},
       {"vram-capacity", c.vram_capacity},
       {"gpu-device", c.gpu_device},
       {"test-crash-at", c.test_crash_at},
       {"test-announce-delay-ms", c.test_announce_delay_ms},
       {"ready-file", c.ready_file},
       {"admin-host", c.admin_host},
       // The port it listens on (with --admin-port 0, the one picked).
       {"admin-port", r.server.port()},
       // Whether a token guards mutating routes; never the token itself.
       {"admin-token-set", !c.admin_token.empty()},
       {"admin-token-file", c.admin_token_file},
       {"max-connections", c.rpc_limits.max_connections},
       {"rpc-idle-timeout-ms", c.rpc_limits.idle_timeout_ms},
       {"rpc-read-timeout-ms", c.rpc_limits.read_timeout_ms},
       {"rpc-poll-us", c.rpc_limits.poll_us},
       {"rpc-engine", c.rpc_limits.engine == RpcEngine::kEpoll ? "epoll" : "threads"},
       {"tls-cert", c.tls.cert_file},
       {"tls-key", c.tls.key_file},
       {"tls-ca", c.tls.ca_file},
       {"log-level", c.log_level}});
}

void WriteTierMetrics(PrometheusWriter& w, const std::vector<TierSnapshot>& tiers) {
  struct TierMetric {
    const char* name;
    const char* help;
    uint64_t TierSnapshot::*field;
    bool counter;
  };
  static constexpr TierMetric kMetrics[] = {
      {"mooncake_worker_tier_capacity_bytes", "Tier capacity", &TierSnapshot::capacity, false},
      {"mooncake_worker_tier_used_bytes", "Tier bytes allocated", &TierSnapshot::used, false},
      {"mooncake_worker_tier_objects", "Objects placed in the tier", &TierSnapshot::objects, false},
      {"mooncake_worker_tier_pinned_bytes", "Bytes of hard-pinned objects in the tier",
       &TierSnapshot::pinned_bytes, false},
      {"mooncake_worker_hits", "Object reads served from the tier", &TierSnapshot::hits, true},
      {"mooncake_worker_promotions", "Objects promoted into the tier", &TierSnapshot::promotions_in,
       true},
      {"mooncake_worker_demotions", "Objects demoted out of the tier", &TierSnapshot::demotions_out,
       true},
      {"mooncake_worker_evictions", "Objects dropped from the node out of the tier",
       &TierSnapshot::evictions, true},
      {"mooncake_worker_tier_read_bytes",
       "Bytes the worker read from the tier (gets, moves between tiers and nodes)",
       &TierSnapshot::read_bytes, true},
      {"mooncake_worker_tier_written_bytes",
       "Bytes the worker wrote to the tier (puts through the worker, moves between tiers)",
       &TierSnapshot::written_bytes, true},
  };
  for (const auto& m : kMetrics) {
    if (m.counter) {
      w.BeginCounter(m.name, m.help);
    } else {
      w.BeginGauge(m.name, m.help);
    }
    for (const auto& t : tiers) {
      w.Sample({{"tier", t.name}, {"kind", std::string(ToString(t.kind))}}, t.*m.field);
    }
  }
}

void WriteTotals(PrometheusWriter& w, const BackendStats& s) {
  struct Total {
    const char* name;
    const char* help;
    uint64_t BackendStats::*field;
  };
  static constexpr Total kTotals[] = {
      {"mooncake_worker_gets", "Object reads (Gets at offset 0; later chunks do not count)",
       &BackendStats::gets},
      {"mooncake_worker_get_misses", "Object reads of keys not here", &BackendStats::get_misses},
      {"mooncake_worker_puts", "Objects stored by Put", &BackendStats::puts},
      {"mooncake_worker_upserts", "Objects stored by Upsert", &BackendStats::upserts},
      {"mooncake_worker_removes", "Objects removed", &BackendStats::removes},
      {"mooncake_worker_dropped", "Objects dropped from the cluster for lack of space",
       &BackendStats::dropped},
      {"mooncake_worker_prefetch_started", "SSD to DRAM prefetches started",
       &BackendStats::prefetch_started},
      {"mooncake_worker_prefetch_succeeded", "Prefetches completed",
       &BackendStats::prefetch_succeeded},
      {"mooncake_worker_prefetch_failed", "Prefetches that failed", &BackendStats::prefetch_failed},
      {"mooncake_worker_prefetch_skipped", "Prefetches not needed or already queued",
       &BackendStats::prefetch_skipped},
      {"mooncake_worker_moved_in", "Objects adopted from other nodes", &BackendStats::moved_in},
      {"mooncake_worker_moved_out", "Objects handed to other nodes", &BackendStats::moved_out},
  };
  for (const auto& t : kTotals) w.Counter(t.name, t.help, s.*t.field);
}

void WriteTransportMetrics(PrometheusWriter& w, const TransportSnapshot& t) {
  w.BeginCounter("mooncake_worker_peer_transfers", "Objects moved to other nodes, by transport");
  w.Sample({{"transport", "rdma"}}, t.rdma_objects);
  w.Sample({{"transport", "tcp"}}, t.tcp_objects);
  w.BeginCounter("mooncake_worker_peer_transfer_bytes", "Bytes moved to other nodes");
  w.Sample({{"transport", "rdma"}}, t.rdma_bytes);
  w.Sample({{"transport", "tcp"}}, t.tcp_bytes);
  w.Counter("mooncake_worker_rdma_fallbacks", "Moves that fell back from RDMA to TCP",
            t.rdma_fallbacks);
  w.Gauge("mooncake_worker_rdma_enabled", "1 when this worker moves data by RDMA",
          t.rdma_enabled ? 1 : 0);
}

HttpResponse Metrics(const WorkerRoutes& r) {
  auto stats = r.backend.Stats();
  PrometheusWriter w;
  w.SetConstLabels({{"node", r.NodeId()}});
  WriteBuildInfo(w);
  WriteProcessMetrics(w, ReadProcessStats());
  WriteTierMetrics(w, stats.tiers);
  WriteTotals(w, stats);
  if (r.transport) WriteTransportMetrics(w, r.transport());
  WriteRequestMetrics(w, "mooncake_worker", r.requests);
  if (r.rpc) WriteRpcServerMetrics(w, r.rpc());
  return HttpResponse::Text(200, w.Take(), std::string(PrometheusWriter::kContentType));
}

}  // namespace

void RegisterWorkerAdminRoutes(AdminServer& server, TieredCacheBackend& backend,
                               const WorkerConfig& config, const RequestMetrics& requests,
                               TransportStatsFn transport, RpcStatsFn rpc, ReadinessFn readiness) {
  auto r = std::make_shared<const WorkerRoutes>(WorkerRoutes{server, backend, config, requests,
                                                             std::move(transport), std::move(rpc),
                                                             std::move(readiness)});
  RegisterProcessRoutes(server, "worker");
  RegisterStatusPage(server, "worker");
  server.Route("GET", "/readyz", [r](const HttpRequest&) { return Readiness(*r); });
  server.Route("GET", "/health", [r](const HttpRequest&) { return Readiness(*r); });
  server.Route("GET", "/stats", [r](const HttpRequest&) { return Stats(*r); });
  server.Route("GET", "/objects/{key...}",
               [r](const HttpRequest& req) { return InspectObject(*r, req); });
  server.Route("DELETE", "/objects/{key...}",
               [r](const HttpRequest& req) { return RemoveObject(*r, req); });
  server.Route("POST", "/evict", [r](const HttpRequest& req) { return Evict(*r, req); });
  server.Route("GET", "/config", [r](const HttpRequest&) { return Config(*r); });
  server.Route("GET", "/metrics", [r](const HttpRequest&) { return Metrics(*r); });
}

}  // namespace mooncake
