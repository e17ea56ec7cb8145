#include "master/admin_routes.h"

#include <charconv>
#include <string>

#include "http/json_util.h"
#include "http/process_routes.h"
#include "http/process_metrics.h"
#include "http/prometheus_writer.h"

namespace mooncake {
namespace {

using nlohmann::json;

constexpr size_t kDefaultKeyLimit = 100;
constexpr size_t kMaxKeyLimit = 10000;

std::string Address(const std::string& host, int port) {
  // IPv6 literals need brackets to stay parseable as host:port.
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

json TierJson(const TierUsage& tier) {
  return {{"name", tier.name},
          {"kind", tier.kind},
          {"capacity", tier.capacity},
          {"used", tier.used},
          {"objects", tier.objects}};
}

json NodeJson(const NodeRecord& node) {
  json tiers = json::array();
  for (const auto& tier : node.tiers) tiers.push_back(TierJson(tier));
  return {{"node_id", node.node_id},
          {"address", Address(node.host, node.port)},
          {"host", node.host},
          {"port", node.port},
          {"alive", node.alive},
          {"state", node.alive ? "alive" : "dead"},
          {"last_heartbeat_ms", node.last_heartbeat_ms},
          {"free_bytes", node.free_bytes()},
          {"tiers", std::move(tiers)}};
}

// /readyz and /health: always 200 while serving; dead nodes make it
// "degraded", one reason each.
HttpResponse Readiness(const MasterService& service) {
  size_t alive = 0, dead = 0;
  json reasons = json::array();
  for (const auto& node : service.ListNodes()) {
    ++(node.alive ? alive : dead);
    if (!node.alive) {
      reasons.push_back("node " + node.node_id + " at " + Address(node.host, node.port) +
                        " is dead (no heartbeat within the node TTL)");
    }
  }
  return JsonResponse({{"status", "ok"},
                       {"ready", true},
                       {"role", "master"},
                       {"keys", service.key_count()},
                       {"nodes_alive", alive},
                       {"nodes_dead", dead},
                       {"degraded", dead > 0},
                       {"reasons", std::move(reasons)}});
}

HttpResponse Nodes(const MasterService& service) {
  json nodes = json::array();
  for (const auto& node : service.ListNodes()) nodes.push_back(NodeJson(node));
  return JsonResponse({{"nodes", std::move(nodes)}});
}

HttpResponse KeyLookup(const MasterService& service, const HttpRequest& req) {
  const std::string& key = *req.PathParam("key");
  auto location = service.GetLocation(key);
  if (!location) {
    return HttpResponse::Error(location.error(), location.error() == ErrorCode::kInvalidKey
                                                     ? "invalid key"
                                                     : "key has no owner: " + key);
  }
  return JsonResponse({{"key", key},
                       {"node_id", location->node_id},
                       {"address", Address(location->host, location->port)},
                       {"host", location->host},
                       {"port", location->port}});
}

// The `limit` query parameter: absent means the default; anything but an
// integer in 1..kMaxKeyLimit is a client error, not silently clamped.
Result<size_t> ParseLimit(const std::string* text) {
  if (!text) return kDefaultKeyLimit;
  size_t value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value == 0 ||
      value > kMaxKeyLimit) {
    return Err(ErrorCode::kInvalidParams);
  }
  return value;
}

HttpResponse KeyList(const MasterService& service, const HttpRequest& req) {
  auto limit = ParseLimit(req.Query("limit"));
  if (!limit) {
    return HttpResponse::Error(limit.error(),
                               "limit must be an integer in 1.." + std::to_string(kMaxKeyLimit));
  }
  const std::string* prefix = req.Query("prefix");
  const std::string* cursor = req.Query("cursor");
  // One extra key tells whether another page exists without a second scan.
  auto keys = service.ListKeys(prefix ? *prefix : "", cursor ? *cursor : "", *limit + 1);
  bool more = keys.size() > *limit;
  if (more) keys.pop_back();
  json out = {{"keys", keys}, {"count", keys.size()}, {"next_cursor", nullptr}};
  if (more) out["next_cursor"] = keys.back();
  return JsonResponse(out);
}

void WriteNodeMetrics(PrometheusWriter& w, const std::vector<NodeRecord>& nodes) {
  w.BeginGauge("mooncake_master_node_up", "1 if the node is alive, 0 if declared dead");
  for (const auto& node : nodes) w.Sample({{"node", node.node_id}}, node.alive ? 1.0 : 0.0);
  struct TierGauge {
    const char* name;
    const char* help;
    uint64_t TierUsage::*field;
  };
  static constexpr TierGauge kGauges[] = {
      {"mooncake_master_node_tier_capacity_bytes", "Tier capacity as last reported by the node",
       &TierUsage::capacity},
      {"mooncake_master_node_tier_used_bytes", "Tier bytes in use as last reported by the node",
       &TierUsage::used},
      {"mooncake_master_node_tier_objects", "Objects in the tier as last reported by the node",
       &TierUsage::objects},
  };
  for (const auto& gauge : kGauges) {
    w.BeginGauge(gauge.name, gauge.help);
    for (const auto& node : nodes) {
      for (const auto& tier : node.tiers) {
        w.Sample({{"node", node.node_id}, {"tier", tier.name}, {"kind", tier.kind}},
                 tier.*gauge.field);
      }
    }
  }
}

HttpResponse Metrics(const MasterService& service, const RequestMetrics* requests,
                     const RpcStatsFn& rpc) {
  auto nodes = service.ListNodes();
  size_t alive = 0, dead = 0;
  for (const auto& node : nodes) ++(node.alive ? alive : dead);
  PrometheusWriter w;
  WriteBuildInfo(w);
  WriteProcessMetrics(w, ReadProcessStats());
  w.Gauge("mooncake_master_keys", "Keys with an owner in the directory",
          static_cast<double>(service.key_count()));
  w.BeginGauge("mooncake_master_nodes", "Registered nodes by liveness");
  w.Sample({{"state", "alive"}}, static_cast<uint64_t>(alive));
  w.Sample({{"state", "dead"}}, static_cast<uint64_t>(dead));
  WriteNodeMetrics(w, nodes);
  if (requests) {
    // A client's get of an absent key ends at the master (get_location finds
    // no owner) and never reaches a worker, so the master counts it.
    uint64_t misses = 0;
    for (const auto& op : requests->Snapshot()) {
      if (op.op != "get_location") continue;
      for (const auto& [code, n] : op.codes) {
        if (code == ErrorCode::kObjectNotFound) misses += n;
      }
    }
    w.Counter("mooncake_master_get_misses",
              "Lookups (get_location) of keys with no owner: client gets of absent keys", misses);
    WriteRequestMetrics(w, "mooncake_master", *requests);
  }
  if (rpc) WriteRpcServerMetrics(w, rpc());
  return HttpResponse::Text(200, w.Take(), std::string(PrometheusWriter::kContentType));
}

}  // namespace

void RegisterMasterAdminRoutes(AdminServer& server, const MasterService& service,
                               const RequestMetrics* requests, RpcStatsFn rpc) {
  const MasterService* svc = &service;
  RegisterProcessRoutes(server, "master");
  server.Route("GET", "/readyz", [svc](const HttpRequest&) { return Readiness(*svc); });
  server.Route("GET", "/health", [svc](const HttpRequest&) { return Readiness(*svc); });
  server.Route("GET", "/nodes", [svc](const HttpRequest&) { return Nodes(*svc); });
  server.Route("GET", "/keys", [svc](const HttpRequest& req) { return KeyList(*svc, req); });
  server.Route("GET", "/keys/{key...}",
               [svc](const HttpRequest& req) { return KeyLookup(*svc, req); });
  server.Route("GET", "/metrics",
               [svc, requests, rpc = std::move(rpc)](const HttpRequest&) {
                 return Metrics(*svc, requests, rpc);
               });
}

}  // namespace mooncake
