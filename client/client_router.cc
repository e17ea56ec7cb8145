#include "client/client_router.h"

#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

// Bounds on one master BatchGetLocation request: keys are at most 4 KiB each,
// so a count cap alone could still outgrow a Thrift frame.
constexpr size_t kMaxLocateBytes = 4ull << 20;
constexpr size_t kMaxLocateCount = 4096;

RpcOptions ToRpcOptions(const ClientConfig& config, std::shared_ptr<const RpcTlsContext> tls) {
  RpcOptions options;
  options.connect_timeout_ms = config.connect_timeout_ms;
  options.io_timeout_ms = config.io_timeout_ms;
  options.tls = std::move(tls);
  return options;
}

}  // namespace

std::vector<std::vector<size_t>> SliceIndices(const std::vector<size_t>& indices,
                                              const std::function<size_t(size_t)>& size_of,
                                              size_t max_bytes, size_t max_count) {
  std::vector<std::vector<size_t>> slices;
  size_t bytes = 0;
  for (size_t i : indices) {
    size_t item_bytes = size_of(i);
    if (slices.empty() || slices.back().size() >= max_count ||
        (bytes + item_bytes > max_bytes && !slices.back().empty())) {
      slices.emplace_back();
      bytes = 0;
    }
    slices.back().push_back(i);
    bytes += item_bytes;
  }
  return slices;
}

std::vector<std::vector<size_t>> SliceIndices(const std::vector<size_t>& indices,
                                              const std::vector<std::string>& keys,
                                              size_t max_bytes, size_t max_count) {
  return SliceIndices(
      indices, [&keys](size_t i) { return keys[i].size(); }, max_bytes, max_count);
}

ClientRouter::ClientRouter(ClientConfig config, ReaddressedFn on_readdressed,
                           std::shared_ptr<const RpcTlsContext> tls)
    : config_(std::move(config)),
      on_readdressed_(std::move(on_readdressed)),
      rpc_options_(ToRpcOptions(config_, std::move(tls))),
      master_(config_.master_host, config_.master_port, rpc_options_) {}

Result<std::vector<rpc::NodeInfo>> ClientRouter::FetchNodes() {
  std::vector<rpc::NodeInfo> nodes;
  auto call = master_.Call([&](rpc::MasterServiceClient& c) { c.ListNodes(nodes); });
  if (!call) return Err(call.error());
  for (const auto& node : nodes) Remember(node.node_id, node.host, node.port);
  return nodes;
}

std::shared_ptr<WorkerChannel> ClientRouter::Cached(const std::string& node_id) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : it->second.channel;
}

Owner ClientRouter::Remember(const std::string& node_id, const std::string& host, int port) {
  bool readdressed = false;
  Owner owner;
  {
    std::lock_guard lock(mu_);
    NodeEntry& entry = nodes_[node_id];
    if (!entry.channel || entry.host != host || entry.port != port) {
      readdressed = entry.channel != nullptr;
      entry.host = host;
      entry.port = port;
      entry.channel = std::make_shared<WorkerChannel>(host, port, rpc_options_);
    }
    owner = Owner{node_id, entry.channel};
  }
  if (readdressed && on_readdressed_) on_readdressed_(node_id);
  return owner;
}

Result<Owner> ClientRouter::Node(const std::string& node_id) {
  if (node_id.empty()) return Err(ErrorCode::kNodeNotFound);
  if (auto channel = Cached(node_id)) return Owner{node_id, channel};
  auto nodes = FetchNodes();
  if (!nodes) return Err(nodes.error());
  if (auto channel = Cached(node_id)) return Owner{node_id, channel};
  return Err(ErrorCode::kNodeNotFound);
}

Result<Owner> ClientRouter::Locate(const std::string& key) {
  if (config_.location_cache_entries > 0) {
    std::lock_guard lock(mu_);
    auto owner = owners_.find(key);
    if (owner != owners_.end()) {
      auto node = nodes_.find(owner->second);
      if (node != nodes_.end() && node->second.channel) {
        return Owner{owner->second, node->second.channel, /*cached=*/true};
      }
    }
  }
  return LocateAtMaster(key);
}

Result<Owner> ClientRouter::LocateAtMaster(const std::string& key) {
  rpc::LocationResult location;
  auto call = master_.Call([&](rpc::MasterServiceClient& c) { c.GetLocation(location, key); });
  if (!call) return Err(call.error());
  if (location.code != rpc::ErrorCode::OK) {
    ForgetOwner(key);
    return Err(FromRpc(location.code));
  }
  Owner owner = Remember(location.node_id, location.host, location.port);
  RememberOwner(key, owner.node_id);
  return owner;
}

void ClientRouter::RememberOwner(const std::string& key, const std::string& node_id) {
  if (config_.location_cache_entries == 0) return;
  std::lock_guard lock(mu_);
  if (owners_.insert_or_assign(key, node_id).second) owner_order_.push_back(key);
  while (owner_order_.size() > config_.location_cache_entries) {
    owners_.erase(owner_order_.front());
    owner_order_.pop_front();
  }
}

void ClientRouter::ForgetOwner(const std::string& key) {
  if (config_.location_cache_entries == 0) return;
  std::lock_guard lock(mu_);
  owners_.erase(key);  // its owner_order_ slot ages out on its own
}

Result<Owner> ClientRouter::Relocate(const std::string& key, const std::string& hint,
                                     const std::string& stale_node) {
  if (!hint.empty() && hint != stale_node) {
    auto hinted = Node(hint);
    if (hinted) {
      RememberOwner(key, hint);
      return hinted;
    }
    MC_LOG_DEBUG("owner hint unusable key={} hint={} error={}", key, hint,
                 ToString(hinted.error()));
  }
  ForgetOwner(key);
  auto located = LocateAtMaster(key);
  if (!located) return located;
  if (located->node_id == stale_node) return Err(ErrorCode::kObjectNotFound);
  return located;
}

Result<Owner> ClientRouter::RelocateUnreachable(const std::string& key,
                                                const std::string& stale_node, ErrorCode failure) {
  ForgetOwner(key);
  auto located = LocateAtMaster(key);
  if (!located) return located;
  if (located->node_id == stale_node) return Err(failure);
  return located;
}

Result<std::map<std::string, OwnerGroup>> ClientRouter::GroupByOwner(
    const std::vector<std::string>& keys, const std::vector<size_t>& todo,
    std::vector<std::pair<size_t, ErrorCode>>& missing) {
  std::map<std::string, OwnerGroup> groups;
  for (const auto& slice : SliceIndices(todo, keys, kMaxLocateBytes, kMaxLocateCount)) {
    std::vector<std::string> slice_keys;
    slice_keys.reserve(slice.size());
    for (size_t i : slice) slice_keys.push_back(keys[i]);
    std::vector<rpc::LocationResult> locations;
    auto call = master_.Call(
        [&](rpc::MasterServiceClient& c) { c.BatchGetLocation(locations, slice_keys); });
    if (!call) return Err(call.error());
    if (locations.size() != slice.size()) {
      MC_LOG_ERROR("master answered {} locations for {} keys", locations.size(), slice.size());
      return Err(ErrorCode::kInternalError);
    }
    for (size_t j = 0; j < slice.size(); ++j) {
      const auto& loc = locations[j];
      if (loc.code != rpc::ErrorCode::OK) {
        missing.emplace_back(slice[j], FromRpc(loc.code));
        continue;
      }
      OwnerGroup& group = groups[loc.node_id];
      if (!group.owner.channel) group.owner = Remember(loc.node_id, loc.host, loc.port);
      group.indices.push_back(slice[j]);
    }
  }
  return groups;
}

Result<Owner> ClientRouter::PickTarget(uint64_t size, const PutOptions& options,
                                       bool& explicit_choice) {
  explicit_choice = !options.preferred_node.empty();
  if (explicit_choice) return Node(options.preferred_node);
  if (!config_.local_node.empty()) {
    auto local = Node(config_.local_node);
    if (local) return local;
    // The co-located worker may be down or not registered yet; the cluster
    // can still take the object elsewhere.
    MC_LOG_WARN("local node unavailable node={} error={}; asking the master", config_.local_node,
                ToString(local.error()));
  }
  return PickByMaster(size, {});
}

Result<Owner> ClientRouter::PickByMaster(uint64_t size, const std::vector<std::string>& exclude) {
  rpc::PickNodeResult picked;
  auto call = master_.Call([&](rpc::MasterServiceClient& c) {
    c.PickNode(picked, static_cast<int64_t>(size), exclude);
  });
  if (!call) return Err(call.error());
  if (picked.code != rpc::ErrorCode::OK) return Err(FromRpc(picked.code));
  return Remember(picked.node.node_id, picked.node.host, picked.node.port);
}

}  // namespace mooncake
