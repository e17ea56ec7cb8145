#include "master/master_handler.h"

#include <exception>
#include <utility>

#include "common/log.h"
#include "thrift/rpc_codes.h"

namespace mooncake {
namespace {

// Negative sizes from the wire cannot be represented: kInvalidParams.
Result<std::vector<TierUsage>> TiersFromRpc(const std::vector<rpc::TierUsage>& tiers) {
  std::vector<TierUsage> out;
  out.reserve(tiers.size());
  for (const auto& t : tiers) {
    if (t.capacity < 0 || t.used < 0 || t.objects < 0) return Err(ErrorCode::kInvalidParams);
    out.push_back(TierUsage{t.name, t.kind, static_cast<uint64_t>(t.capacity),
                            static_cast<uint64_t>(t.used), static_cast<uint64_t>(t.objects)});
  }
  return out;
}

rpc::TierUsage TierToRpc(const TierUsage& t) {
  rpc::TierUsage out;
  out.name = t.name;
  out.kind = t.kind;
  out.capacity = static_cast<int64_t>(t.capacity);
  out.used = static_cast<int64_t>(t.used);
  out.objects = static_cast<int64_t>(t.objects);
  return out;
}

rpc::NodeInfo NodeToRpc(const NodeRecord& node) {
  rpc::NodeInfo out;
  out.node_id = node.node_id;
  out.host = node.host;
  out.port = node.port;
  for (const auto& t : node.tiers) out.tiers.push_back(TierToRpc(t));
  out.alive = node.alive;
  out.last_heartbeat_ms = node.last_heartbeat_ms;
  return out;
}

rpc::LocationResult LocationToRpc(const Result<KeyLocation>& loc) {
  rpc::LocationResult out;
  out.code = loc ? rpc::ErrorCode::OK : ToRpc(loc.error());
  if (loc) {
    out.node_id = loc->node_id;
    out.host = loc->host;
    out.port = loc->port;
  }
  return out;
}

// Runs a handler body; an exception (in practice only bad_alloc) is logged
// and reported as false so the caller can answer INTERNAL_ERROR instead of
// letting Thrift turn it into a TApplicationException.
template <typename Fn>
bool Guarded(const char* method, Fn&& fn) noexcept {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    MC_LOG_ERROR("master handler failed method={} error=\"{}\"", method, e.what());
  } catch (...) {
    MC_LOG_ERROR("master handler failed method={} error=unknown", method);
  }
  return false;
}

// Guarded for methods that answer with a bare ErrorCode.
template <typename Fn>
rpc::ErrorCode::type GuardedCode(const char* method, Fn&& fn) noexcept {
  rpc::ErrorCode::type code = rpc::ErrorCode::INTERNAL_ERROR;
  Guarded(method, [&] { code = ToRpc(fn()); });
  return code;
}

// Records one request when it goes out of scope, with the code the call
// answered (read through `code` at that moment).
class TimedCall {
 public:
  TimedCall(RequestMetrics& metrics, std::string_view op, const rpc::ErrorCode::type& code)
      : timer_(metrics, op), code_(code) {}
  ~TimedCall() { timer_.Finish(FromRpc(code_)); }

 private:
  RequestTimer timer_;
  const rpc::ErrorCode::type& code_;
};

}  // namespace

std::vector<std::string> MasterHandler::OperationNames() {
  return {"register_node",      "heartbeat",       "get_location", "batch_get_location",
          "put_owner",          "batch_put_owner", "update_owner", "remove_owner",
          "batch_remove_owner", "announce_keys",   "pick_node",    "list_nodes"};
}

rpc::ErrorCode::type MasterHandler::RegisterNode(const rpc::NodeInfo& node) {
  rpc::ErrorCode::type code = rpc::ErrorCode::INTERNAL_ERROR;
  TimedCall timed(requests_, "register_node", code);
  code = GuardedCode("RegisterNode", [&]() -> Result<void> {
    auto tiers = TiersFromRpc(node.tiers);
    if (!tiers) return Err(tiers.error());
    NodeRecord record;
    record.node_id = node.node_id;
    record.host = node.host;
    record.port = node.port;
    record.tiers = std::move(*tiers);
    return service_.RegisterNode(std::move(record));
  });
  return code;
}

rpc::ErrorCode::type MasterHandler::Heartbeat(const std::string& node_id,
                                              const std::vector<rpc::TierUsage>& tiers) {
  rpc::ErrorCode::type code = rpc::ErrorCode::INTERNAL_ERROR;
  TimedCall timed(requests_, "heartbeat", code);
  code = GuardedCode("Heartbeat", [&]() -> Result<void> {
    auto converted = TiersFromRpc(tiers);
    if (!converted) return Err(converted.error());
    return service_.Heartbeat(node_id, std::move(*converted));
  });
  return code;
}

void MasterHandler::GetLocation(rpc::LocationResult& _return, const std::string& key) {
  TimedCall timed(requests_, "get_location", _return.code);
  if (!Guarded("GetLocation", [&] { _return = LocationToRpc(service_.GetLocation(key)); })) {
    _return = rpc::LocationResult();
    _return.code = rpc::ErrorCode::INTERNAL_ERROR;
  }
}

void MasterHandler::BatchGetLocation(std::vector<rpc::LocationResult>& _return,
                                     const std::vector<std::string>& keys) {
  static constexpr rpc::ErrorCode::type kAnswered = rpc::ErrorCode::OK;
  TimedCall timed(requests_, "batch_get_location", kAnswered);
  bool ok = Guarded("BatchGetLocation", [&] {
    auto results = service_.BatchGetLocation(keys);
    _return.clear();
    _return.reserve(results.size());
    for (const auto& r : results) _return.push_back(LocationToRpc(r));
  });
  if (!ok) {
    // Still one result per key, in order, as every batch call promises.
    rpc::LocationResult failed;
    failed.code = rpc::ErrorCode::INTERNAL_ERROR;
    _return.assign(keys.size(), failed);
  }
}

void MasterHandler::PutOwner(rpc::PutOwnerResult& _return, const std::string& key,
                             const std::string& node_id) {
  TimedCall timed(requests_, "put_owner", _return.code);
  bool ok = Guarded("PutOwner", [&] {
    std::string winner;
    auto result = service_.PutOwner(key, node_id, &winner);
    _return.code = ToRpc(result);
    _return.owner = result ? node_id : winner;
  });
  if (!ok) _return.code = rpc::ErrorCode::INTERNAL_ERROR;
}

void MasterHandler::BatchPutOwner(std::vector<rpc::PutOwnerResult>& _return,
                                  const std::vector<std::string>& keys,
                                  const std::string& node_id) {
  static constexpr rpc::ErrorCode::type kAnswered = rpc::ErrorCode::OK;
  TimedCall timed(requests_, "batch_put_owner", kAnswered);
  bool ok = Guarded("BatchPutOwner", [&] {
    std::vector<std::string> winners;
    auto results = service_.BatchPutOwner(keys, node_id, &winners);
    _return.clear();
    _return.reserve(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      rpc::PutOwnerResult& out = _return.emplace_back();
      out.code = ToRpc(results[i]);
      out.owner = results[i] ? node_id : std::move(winners[i]);
    }
  });
  if (!ok) {
    rpc::PutOwnerResult failed;
    failed.code = rpc::ErrorCode::INTERNAL_ERROR;
    _return.assign(keys.size(), failed);
  }
}

rpc::ErrorCode::type MasterHandler::UpdateOwner(const std::string& key,
                                                const std::string& expected_owner,
                                                const std::string& new_owner) {
  rpc::ErrorCode::type code = rpc::ErrorCode::INTERNAL_ERROR;
  TimedCall timed(requests_, "update_owner", code);
  code = GuardedCode("UpdateOwner",
                     [&] { return service_.UpdateOwner(key, expected_owner, new_owner); });
  return code;
}

rpc::ErrorCode::type MasterHandler::RemoveOwner(const std::string& key,
                                                const std::string& node_id) {
  rpc::ErrorCode::type code = rpc::ErrorCode::INTERNAL_ERROR;
  TimedCall timed(requests_, "remove_owner", code);
  code = GuardedCode("RemoveOwner", [&] { return service_.RemoveOwner(key, node_id); });
  return code;
}

void MasterHandler::BatchRemoveOwner(std::vector<rpc::ErrorCode::type>& _return,
                                     const std::vector<std::string>& keys,
                                     const std::string& node_id) {
  static constexpr rpc::ErrorCode::type kAnswered = rpc::ErrorCode::OK;
  TimedCall timed(requests_, "batch_remove_owner", kAnswered);
  bool ok = Guarded("BatchRemoveOwner", [&] {
    auto results = service_.BatchRemoveOwner(keys, node_id);
    _return.clear();
    _return.reserve(results.size());
    for (const auto& result : results) _return.push_back(ToRpc(result));
  });
  if (!ok) _return.assign(keys.size(), rpc::ErrorCode::INTERNAL_ERROR);
}

void MasterHandler::AnnounceKeys(rpc::AnnounceResult& _return, const std::string& node_id,
                                 const std::vector<std::string>& keys) {
  TimedCall timed(requests_, "announce_keys", _return.code);
  bool ok = Guarded("AnnounceKeys", [&] {
    auto result = service_.AnnounceKeys(node_id, keys);
    _return.code = result ? rpc::ErrorCode::OK : ToRpc(result.error());
    if (result) _return.rejected = std::move(*result);
  });
  if (!ok) _return.code = rpc::ErrorCode::INTERNAL_ERROR;
}

void MasterHandler::PickNode(rpc::PickNodeResult& _return, int64_t size,
                             const std::vector<std::string>& exclude) {
  TimedCall timed(requests_, "pick_node", _return.code);
  if (size < 0) {
    _return.code = rpc::ErrorCode::INVALID_PARAMS;
    return;
  }
  bool ok = Guarded("PickNode", [&] {
    auto result = service_.PickNode(static_cast<uint64_t>(size), exclude);
    _return.code = result ? rpc::ErrorCode::OK : ToRpc(result.error());
    if (result) _return.node = NodeToRpc(*result);
  });
  if (!ok) _return.code = rpc::ErrorCode::INTERNAL_ERROR;
}

void MasterHandler::ListNodes(std::vector<rpc::NodeInfo>& _return) {
  static constexpr rpc::ErrorCode::type kAnswered = rpc::ErrorCode::OK;
  TimedCall timed(requests_, "list_nodes", kAnswered);
  bool ok = Guarded("ListNodes", [&] {
    _return.clear();
    for (const auto& node : service_.ListNodes()) _return.push_back(NodeToRpc(node));
  });
  if (!ok) _return.clear();
}

void MasterHandler::GetRole(rpc::MasterRole& _return) {
  // Without HA a master leads its own one-master group. MasterServer wraps
  // this handler in LeaderGatedHandler, whose GetRole answers instead (with
  // this master's address); this one serves handlers used bare (tests).
  _return = rpc::MasterRole();
  _return.is_leader = true;
}

}  // namespace mooncake
