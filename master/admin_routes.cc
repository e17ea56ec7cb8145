#include "master/admin_routes.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/tier_stats_json.h"
#include "http/json_util.h"
#include "http/process_metrics.h"
#include "http/process_routes.h"
#include "http/prometheus_writer.h"
#include "http/status_page.h"
#include "master/leader_election.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_channel.h"

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
          // Measured here: a browser's clock may differ from the master's.
          {"heartbeat_age_ms", std::max<int64_t>(0, WallMillis() - node.last_heartbeat_ms)},
          {"free_bytes", node.free_bytes()},
          {"tiers", std::move(tiers)}};
}

// This master's HA role for /readyz and /metrics: "standalone" (no
// --etcd, serving keys), "leader" (serving keys), "rebuilding" (inside the
// --rebuild-ms window after a start or an election: key calls still answer
// NOT_LEADER) or "standby".
struct HaRole {
  std::string name = "standalone";
  std::string leader;  // the leader's RPC address; empty when unknown or standalone
  bool serving = true;
  bool standalone = true;
  std::string campaign_problem;  // a standby's: why it could not campaign
};

HaRole RoleOf(const RoleGate* gate) {
  HaRole out;
  if (!gate) return out;
  RoleSnapshot snap = gate->Snapshot();
  out.standalone = snap.standalone;
  if (!snap.standalone) out.leader = snap.leader_address;
  out.serving = snap.serving_keys;
  out.campaign_problem = snap.campaign_problem;
  out.name = snap.serving_keys ? (snap.standalone ? "standalone" : "leader")
             : snap.leader     ? "rebuilding"
                               : "standby";
  return out;
}

// /readyz and /health: 200 while this master serves key calls; dead nodes
// make it "degraded", one reason each. A standby, or a master still
// rebuilding its directory (after its start or an election), answers every
// key call NOT_LEADER, so it is not ready: 503 "ready":false with the
// reason.
HttpResponse Readiness(const MasterService& service, const RoleGate* gate) {
  const HaRole role = RoleOf(gate);
  size_t alive = 0, dead = 0;
  json reasons = json::array();
  if (role.name == "standby") {
    reasons.push_back("standby: " +
                      (role.leader.empty() ? std::string("no leader known yet")
                                           : "the leader is " + role.leader) +
                      "; key calls answer NOT_LEADER here");
    if (!role.campaign_problem.empty()) {
      reasons.push_back("standby: cannot campaign for leadership: " + role.campaign_problem);
    }
  } else if (role.name == "rebuilding") {
    reasons.push_back(std::string(role.standalone ? "master just started" : "new leader") +
                      " rebuilding its directory from the workers' announcements; key calls "
                      "answer NOT_LEADER until --rebuild-ms passes");
  }
  for (const auto& node : service.ListNodes()) {
    ++(node.alive ? alive : dead);
    if (!node.alive) {
      reasons.push_back("node " + node.node_id + " at " + Address(node.host, node.port) +
                        " is dead (no heartbeat within the node TTL)");
    }
  }
  json leader = role.leader.empty() ? json(nullptr) : json(role.leader);
  return JsonResponse({{"status", role.serving ? "ok" : "unavailable"},
                       {"ready", role.serving},
                       {"role", "master"},
                       {"ha_role", role.name},
                       {"leader", std::move(leader)},
                       {"keys", service.key_count()},
                       {"nodes_alive", alive},
                       {"nodes_dead", dead},
                       {"degraded", dead > 0},
                       {"reasons", std::move(reasons)}},
                      role.serving ? 200 : 503);
}

HttpResponse Nodes(const MasterService& service) {
  json nodes = json::array();
  for (const auto& node : service.ListNodes()) nodes.push_back(NodeJson(node));
  return JsonResponse({{"nodes", std::move(nodes)}});
}

HttpResponse ForgetNode(MasterService& service, const HttpRequest& req) {
  const std::string& id = *req.PathParam("id");
  auto forgotten = service.ForgetNode(id);
  if (!forgotten && forgotten.error() == ErrorCode::kObjectAlreadyExists) {
    return HttpResponse::Error(409, "NODE_ALIVE",
                               "node " + id + " is alive; only a dead node can be forgotten");
  }
  if (!forgotten) return HttpResponse::Error(forgotten.error(), "no such node: " + id);
  return JsonResponse({{"node_id", id}, {"forgotten", true}});
}

// /keys answers from this master's directory, which is whole only while it
// serves key calls: a standby's is empty, and a rebuilding master's lacks
// the keys of workers that have not re-announced yet. So, like the Thrift
// key calls, it answers 503 NOT_LEADER then, never "no owner" or a partial
// listing.
std::optional<HttpResponse> NotServingKeys(const RoleGate* gate) {
  const HaRole role = RoleOf(gate);
  if (role.serving) return std::nullopt;
  if (role.name == "standby") {
    return HttpResponse::Error(503, "NOT_LEADER",
                               "this master is a standby (" +
                                   (role.leader.empty() ? std::string("no leader known yet")
                                                        : "the leader is " + role.leader) +
                                   "); its directory is empty: ask the leader's admin server");
  }
  return HttpResponse::Error(503, "NOT_LEADER",
                             "this master is rebuilding its directory from the workers' "
                             "announcements (--rebuild-ms); keys not announced yet would read "
                             "as absent: retry shortly");
}

HttpResponse KeyLookup(const MasterService& service, const RoleGate* gate, const HttpRequest& req) {
  if (auto refused = NotServingKeys(gate)) return std::move(*refused);
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

// A key is any bytes but NUL. next_cursor carries the last key of a page
// through JSON, which would turn bytes that are not UTF-8 into U+FFFD: a
// cursor that no longer names the key, so paging after it repeated or
// skipped keys, or never ended. So the cursor is the key with '%', controls,
// space and every non-ASCII byte written as %XX: plain ASCII, lossless.
// Clients treat it as opaque; a key without such bytes is its own cursor,
// and a cursor taken from a page's last key (how clients paged before) still
// works unless that key holds '%' and two hex digits.
std::string EncodeCursor(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    const auto b = static_cast<unsigned char>(c);
    if (b > 0x20 && b < 0x7F && b != '%') {
      out += c;
    } else {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
    }
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The key an EncodeCursor cursor names. A '%' not followed by two hex digits
// stays as it is (an old plain cursor).
std::string DecodeCursor(std::string_view cursor) {
  std::string out;
  out.reserve(cursor.size());
  for (size_t i = 0; i < cursor.size(); ++i) {
    const bool escape = cursor[i] == '%' && i + 2 < cursor.size() && HexDigit(cursor[i + 1]) >= 0 &&
                        HexDigit(cursor[i + 2]) >= 0;
    if (!escape) {
      out += cursor[i];
      continue;
    }
    out += static_cast<char>(HexDigit(cursor[i + 1]) << 4 | HexDigit(cursor[i + 2]));
    i += 2;
  }
  return out;
}

HttpResponse KeyList(const MasterService& service, const RoleGate* gate, const HttpRequest& req) {
  if (auto refused = NotServingKeys(gate)) return std::move(*refused);
  auto limit = ParseLimit(req.Query("limit"));
  if (!limit) {
    return HttpResponse::Error(limit.error(),
                               "limit must be an integer in 1.." + std::to_string(kMaxKeyLimit));
  }
  const std::string* prefix = req.Query("prefix");
  const std::string* cursor = req.Query("cursor");
  // One extra key tells whether another page exists without a second scan.
  auto keys =
      service.ListKeys(prefix ? *prefix : "", cursor ? DecodeCursor(*cursor) : "", *limit + 1);
  bool more = keys.size() > *limit;
  if (more) keys.pop_back();
  json out = {{"keys", keys}, {"count", keys.size()}, {"next_cursor", nullptr}};
  if (more) out["next_cursor"] = EncodeCursor(keys.back());
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

// Keys looked up at the master that had no owner: get_location answers
// OBJECT_NOT_FOUND plus every such key of a batch_get_location. Clients look
// a key up the same way before a get, exist, remove or inspect, and the RPC
// does not say which, so misses of all four are counted.
uint64_t GetMisses(const MasterService& service, const RequestMetrics& requests) {
  uint64_t misses = service.batch_lookup_misses();
  for (const auto& op : requests.Snapshot()) {
    if (op.op != "get_location") continue;
    for (const auto& [code, n] : op.codes) {
      if (code == ErrorCode::kObjectNotFound) misses += n;
    }
  }
  return misses;
}

HttpResponse MasterStats(const MasterService& service, const RequestMetrics* requests) {
  size_t alive = 0, dead = 0;
  for (const auto& node : service.ListNodes()) ++(node.alive ? alive : dead);
  return JsonResponse({{"role", "master"},
                       {"keys", service.key_count()},
                       {"nodes_alive", alive},
                       {"nodes_dead", dead},
                       {"get_misses", requests ? GetMisses(service, *requests) : 0},
                       {"requests", requests ? RequestsJson(*requests) : json::object()}});
}

json WorkerStatsJson(const rpc::WorkerStats& s) {
  return {
      {"tiers", TiersJson(s)}, {"totals", WorkerTotalsJson(s)}, {"pinned_bytes", s.pinned_bytes}};
}

// Asks alive workers for their counters over the Stats RPC, for
// /cluster/stats. The bounds (see admin_routes.h) keep a page left open, or
// many, from loading the workers or pinning the admin server's threads.
//
// Thread-safety: Collect() from any thread; collect_mu_ lets one collection
// run at a time (the others answer from the cache meanwhile, never waiting
// for it); cache_mu_ guards the cached answer; mu_ guards channels_.
class WorkerStatsCollector {
 public:
  explicit WorkerStatsCollector(TlsSettings tls) : tls_settings_(std::move(tls)) {}

  json Collect(const std::vector<NodeRecord>& nodes) {
    if (auto fresh = Cached(/*any_age=*/false)) return *fresh;
    // A request arriving while a collection runs (a frozen worker makes one
    // last seconds) does not wait for it on one of the admin server's few
    // threads, which /readyz and /metrics share: it gets the last answer,
    // however old (age_ms says), or before the first one, every node as not
    // answered yet.
    std::unique_lock collect(collect_mu_, std::try_to_lock);
    if (!collect.owns_lock()) {
      if (auto last = Cached(/*any_age=*/true)) return *last;
      json out = json::array();
      for (const auto& node : nodes) {
        json head = NodeHead(node);
        head["error"] = "a collection of worker stats is in progress; try again shortly";
        out.push_back(std::move(head));
      }
      return {{"nodes", std::move(out)}, {"age_ms", 0}};
    }
    // Another collection may have ended between the two looks.
    if (auto fresh = Cached(/*any_age=*/false)) return *fresh;
    json collected = {{"nodes", QueryAll(nodes)}};
    {
      std::lock_guard lock(cache_mu_);
      cached_ = collected;
      cached_at_ = std::chrono::steady_clock::now();
      has_cached_ = true;
    }
    collected["age_ms"] = 0;
    return collected;
  }

 private:
  using Channel = RpcChannel<rpc::WorkerServiceClient>;
  static constexpr auto kReuseFor = std::chrono::seconds(1);
  static constexpr size_t kMaxQueried = 64;
  static constexpr int kConnectTimeoutMs = 300;
  static constexpr int kCallTimeoutMs = 1000;

  // The last answer with its age_ms; nullopt if there is none, or if it is
  // older than kReuseFor and `any_age` is false.
  std::optional<json> Cached(bool any_age) {
    std::lock_guard lock(cache_mu_);
    auto now = std::chrono::steady_clock::now();
    if (!has_cached_ || (!any_age && now - cached_at_ >= kReuseFor)) return std::nullopt;
    json out = cached_;
    out["age_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(now - cached_at_).count();
    return out;
  }

  static json NodeHead(const NodeRecord& node) {
    return {{"node_id", node.node_id},
            {"address", Address(node.host, node.port)},
            {"ok", false},
            {"error", nullptr}};
  }

  json QueryAll(const std::vector<NodeRecord>& nodes) {
    std::vector<std::pair<json, std::future<json>>> pending;
    size_t queried = 0;
    for (const auto& node : nodes) {
      json head = NodeHead(node);
      if (!node.alive) {
        head["error"] = "node is dead (no heartbeat within the node TTL)";
        pending.emplace_back(std::move(head), std::future<json>());
      } else if (queried++ >= kMaxQueried) {
        head["error"] = "not queried: more than " + std::to_string(kMaxQueried) + " nodes";
        pending.emplace_back(std::move(head), std::future<json>());
      } else {
        std::string why;
        auto channel = ChannelFor(node, &why);
        pending.emplace_back(std::move(head), std::async(std::launch::async, [channel, why] {
                               return channel ? Query(*channel) : json{{"error", why}};
                             }));
      }
    }
    ForgetChannelsExcept(nodes);
    json out = json::array();
    for (auto& [head, future] : pending) {
      if (future.valid()) {
        json body = future.get();
        if (body.contains("error")) {
          head["error"] = body["error"];
        } else {
          head.update(body);
          head["ok"] = true;
        }
      }
      out.push_back(std::move(head));
    }
    return out;
  }

  static json Query(Channel& channel) {
    auto stats = channel.Call([](rpc::WorkerServiceClient& client) {
      rpc::WorkerStats out;
      client.Stats(out);
      return out;
    });
    if (!stats) {
      return {{"error", "Stats RPC to " + channel.host() + ":" + std::to_string(channel.port()) +
                            " failed: " + std::string(ToString(stats.error()))}};
    }
    return WorkerStatsJson(*stats);
  }

  // One pooled channel per node, replaced when the node's address changes.
  // Null when the TLS files cannot be loaded (`*why` says why).
  std::shared_ptr<Channel> ChannelFor(const NodeRecord& node, std::string* why) {
    std::lock_guard lock(mu_);
    if (!tls_loaded_) {
      tls_loaded_ = true;
      std::string why;
      auto tls = RpcTlsContext::Create(tls_settings_, /*server=*/false, &why);
      if (tls) {
        tls_ = *tls;
      } else {
        tls_error_ = "TLS files unusable: " + why;
      }
    }
    if (!tls_error_.empty()) {
      *why = tls_error_;
      return nullptr;
    }
    auto& channel = channels_[node.node_id];
    if (!channel || channel->host() != node.host || channel->port() != node.port) {
      channel = std::make_shared<Channel>(node.host, node.port,
                                          RpcOptions{.connect_timeout_ms = kConnectTimeoutMs,
                                                     .io_timeout_ms = kCallTimeoutMs,
                                                     // Rare operator calls: not worth a spin.
                                                     .poll_us = 0,
                                                     .max_idle = 2,
                                                     .tls = tls_});
    }
    return channel;
  }

  // Drops the channels (and their idle connections) of nodes the master
  // no longer lists.
  void ForgetChannelsExcept(const std::vector<NodeRecord>& nodes) {
    std::lock_guard lock(mu_);
    std::erase_if(channels_, [&](const auto& entry) {
      return std::none_of(nodes.begin(), nodes.end(),
                          [&](const NodeRecord& n) { return n.node_id == entry.first; });
    });
  }

  const TlsSettings tls_settings_;
  std::mutex collect_mu_;  // held by the one collection running
  std::mutex cache_mu_;
  json cached_;  // guarded by cache_mu_, as are the two below
  std::chrono::steady_clock::time_point cached_at_;
  bool has_cached_ = false;
  std::mutex mu_;
  bool tls_loaded_ = false;                   // guarded by mu_, as are the three below
  std::shared_ptr<const RpcTlsContext> tls_;  // null: plain TCP
  std::string tls_error_;
  std::map<std::string, std::shared_ptr<Channel>> channels_;
};

HttpResponse Metrics(const MasterService& service, const RequestMetrics* requests,
                     const RpcStatsFn& rpc, const RoleGate* gate) {
  auto nodes = service.ListNodes();
  size_t alive = 0, dead = 0;
  for (const auto& node : nodes) ++(node.alive ? alive : dead);
  PrometheusWriter w;
  WriteBuildInfo(w);
  WriteProcessMetrics(w, ReadProcessStats());
  w.Gauge("mooncake_master_keys", "Keys with an owner in the directory",
          static_cast<double>(service.key_count()));
  // A standby's registry is its own (empty) one: this tells it apart.
  const HaRole role = RoleOf(gate);
  w.Gauge("mooncake_master_is_leader",
          "1 if this master serves key calls (the HA leader, or a master without --etcd, "
          "past its rebuild window), else 0",
          role.serving ? 1.0 : 0.0);
  w.BeginGauge("mooncake_master_ha_role",
               "1 for this master's HA role: standalone, leader, rebuilding or standby");
  for (const char* name : {"standalone", "leader", "rebuilding", "standby"}) {
    w.Sample({{"role", name}}, role.name == name ? 1.0 : 0.0);
  }
  w.BeginGauge("mooncake_master_nodes", "Registered nodes by liveness");
  w.Sample({{"state", "alive"}}, static_cast<uint64_t>(alive));
  w.Sample({{"state", "dead"}}, static_cast<uint64_t>(dead));
  WriteNodeMetrics(w, nodes);
  if (requests) {
    // A client's get of an absent key ends at the master (the lookup finds
    // no owner) and never reaches a worker, so the master counts it.
    uint64_t misses = GetMisses(service, *requests);
    w.Counter("mooncake_master_get_misses",
              "Keys looked up (get_location, batch_get_location) with no owner: client gets, "
              "exists, removes and inspects of absent keys",
              misses);
    WriteRequestMetrics(w, "mooncake_master", *requests);
  }
  if (rpc) WriteRpcServerMetrics(w, rpc());
  return HttpResponse::Text(200, w.Take(), std::string(PrometheusWriter::kContentType));
}

}  // namespace

void RegisterMasterAdminRoutes(AdminServer& server, MasterService& service,
                               const RequestMetrics* requests, RpcStatsFn rpc,
                               TlsSettings worker_tls, const RoleGate* gate) {
  MasterService* svc = &service;
  auto collector = std::make_shared<WorkerStatsCollector>(std::move(worker_tls));
  RegisterProcessRoutes(server, "master");
  RegisterStatusPage(server, "master");
  server.Route("GET", "/stats",
               [svc, requests](const HttpRequest&) { return MasterStats(*svc, requests); });
  server.Route("GET", "/cluster/stats", [svc, collector](const HttpRequest&) {
    return JsonResponse(collector->Collect(svc->ListNodes()));
  });
  server.Route("GET", "/readyz", [svc, gate](const HttpRequest&) { return Readiness(*svc, gate); });
  server.Route("GET", "/health", [svc, gate](const HttpRequest&) { return Readiness(*svc, gate); });
  server.Route("GET", "/nodes", [svc](const HttpRequest&) { return Nodes(*svc); });
  server.Route("DELETE", "/nodes/{id}",
               [svc](const HttpRequest& req) { return ForgetNode(*svc, req); });
  server.Route("GET", "/keys",
               [svc, gate](const HttpRequest& req) { return KeyList(*svc, gate, req); });
  server.Route("GET", "/keys/{key...}",
               [svc, gate](const HttpRequest& req) { return KeyLookup(*svc, gate, req); });
  server.Route("GET", "/metrics", [svc, requests, rpc = std::move(rpc), gate](const HttpRequest&) {
    return Metrics(*svc, requests, rpc, gate);
  });
}

}  // namespace mooncake
