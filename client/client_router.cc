#include "client/client_router.h"

#include <algorithm>
#include <utility>

#include "common/clock.h"
#include "common/etcd_client.h"
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
  options.poll_us = std::clamp(config.rpc_poll_us, 0, kMaxRpcPollUs);
  options.tls = std::move(tls);
  return options;
}

}  // namespace

MasterTarget ToMasterTarget(const ClientConfig& config) {
  MasterTarget target{.host = config.master_host, .port = config.master_port};
  if (!config.etcd_endpoints.empty()) {
    // An unparseable list stays non-empty so that validation rejects it.
    target.etcd_endpoints = ParseEtcdEndpoints(config.etcd_endpoints)
                                .value_or(std::vector<std::string>{config.etcd_endpoints});
    target.cluster_name = config.cluster_name;
    target.leader_wait_ms = config.leader_wait_ms;
  }
  return target;
}

std::optional<SlotTable> ToSlotTable(const ClientConfig& config) {
  if (config.master_shards.empty()) return std::nullopt;
  std::string why;
  auto table = ParseMasterShards(config.master_shards, &why);
  if (!table) {
    MC_LOG_ERROR("client master shards unusable reason=\"{}\"", why);
    return std::nullopt;
  }
  return std::move(*table);
}

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

TierUsage ToTierUsage(const rpc::TierUsage& usage) {
  auto non_negative = [](int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; };
  return TierUsage{usage.name, usage.kind, non_negative(usage.capacity), non_negative(usage.used),
                   non_negative(usage.objects)};
}

NodeRecord ToNodeRecord(const rpc::NodeInfo& info) {
  NodeRecord record;
  record.node_id = info.node_id;
  record.host = info.host;
  record.port = info.port;
  for (const auto& tier : info.tiers) record.tiers.push_back(ToTierUsage(tier));
  record.alive = info.alive;
  record.last_heartbeat_ms = info.last_heartbeat_ms;
  return record;
}

ClientRouter::ClientRouter(ClientConfig config, ReaddressedFn on_readdressed,
                           std::shared_ptr<const RpcTlsContext> tls)
    : config_(std::move(config)),
      on_readdressed_(std::move(on_readdressed)),
      rpc_options_(ToRpcOptions(config_, std::move(tls))),
      masters_(ToMasterTarget(config_), ToSlotTable(config_), rpc_options_),
      pick_reuse_(std::clamp<int64_t>(config_.pick_reuse_ms, 0, 3'600'000)) {}

Result<std::vector<rpc::NodeInfo>> ClientRouter::FetchNodes() {
  auto nodes = masters_.Any().Call([&](rpc::MasterServiceClient& c) {
    std::vector<rpc::NodeInfo> listed;
    c.ListNodes(listed);
    return listed;
  });
  if (!nodes) return Err(nodes.error());
  for (const auto& node : *nodes) Remember(node.node_id, node.host, node.port);
  return nodes;
}

std::shared_ptr<WorkerChannel> ClientRouter::Cached(const std::string& node_id) {
  std::shared_lock lock(mu_);
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
  if (auto owner = LocateCached(key)) return std::move(*owner);
  return LocateAtMaster(key);
}

std::optional<Owner> ClientRouter::LocateCached(std::string_view key) {
  auto node_id = owners_.Find(key);
  if (!node_id) return std::nullopt;
  auto channel = Cached(*node_id);
  if (!channel) return std::nullopt;
  return Owner{std::move(*node_id), std::move(channel), /*cached=*/true};
}

Result<Owner> ClientRouter::LocateAtMaster(const std::string& key) {
  // The reply is returned, not captured, so the master channel sees a
  // NOT_LEADER answer and follows the leader.
  auto call = masters_.ForKey(key).Call([&](rpc::MasterServiceClient& c) {
    rpc::LocationResult r;
    c.GetLocation(r, key);
    return r;
  });
  if (!call) return Err(call.error());
  const rpc::LocationResult& location = *call;
  if (location.code != rpc::ErrorCode::OK) {
    ForgetOwner(key);
    return Err(FromRpc(location.code));
  }
  Owner owner = Remember(location.node_id, location.host, location.port);
  RememberOwner(key, owner.node_id);
  return owner;
}

void ClientRouter::RememberOwner(std::string_view key, std::string_view node_id) {
  owners_.Remember(key, node_id);
}

void ClientRouter::ForgetOwner(const std::string& key) { owners_.Forget(key); }

Result<Owner> ClientRouter::Relocate(const std::string& key, const std::string& hint,
                                     const std::string& stale_node) {
  if (!hint.empty() && hint != stale_node) {
    auto hinted = Node(hint);
    if (hinted) {
      RememberOwner(key, hint);
      // The address is the registry cache's, which a worker that restarted
      // on another port has left: marked cached, a caller that cannot reach
      // it asks the master (RelocateUnreachable) instead of failing.
      hinted->cached = true;
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

Result<Owner> ClientRouter::RelocateUnreachable(const std::string& key, const Owner& stale,
                                                ErrorCode failure) {
  ForgetOwner(key);
  auto located = LocateAtMaster(key);
  if (!located) return located;
  // A node's channel is replaced exactly when its address changes.
  if (located->node_id == stale.node_id && located->channel == stale.channel) return Err(failure);
  return located;
}

Result<std::map<std::string, OwnerGroup>> ClientRouter::GroupByOwner(
    const std::vector<std::string>& keys, const std::vector<size_t>& todo,
    std::vector<std::pair<size_t, ErrorCode>>& missing) {
  std::map<std::string, OwnerGroup> groups;
  const std::vector<ShardKeys> shards = masters_.ForKeys(keys, todo);
  for (const ShardKeys& shard : shards) {
    if (auto located = LocateAtShard(shard, keys, groups, missing); !located) {
      return Err(located.error());
    }
  }
  if (shards.size() > 1) {
    // Shard by shard appended each group's indices out of `todo` order.
    for (auto& [node, group] : groups) std::ranges::sort(group.indices);
    std::ranges::sort(missing);
  }
  return groups;
}

Result<void> ClientRouter::LocateAtShard(const ShardKeys& shard,
                                         const std::vector<std::string>& keys,
                                         std::map<std::string, OwnerGroup>& groups,
                                         std::vector<std::pair<size_t, ErrorCode>>& missing) {
  MasterEndpoint& master = masters_.Shard(shard.shard);
  for (const auto& slice : SliceIndices(shard.indices, keys, kMaxLocateBytes, kMaxLocateCount)) {
    std::vector<std::string> slice_keys;
    slice_keys.reserve(slice.size());
    for (size_t i : slice) slice_keys.push_back(keys[i]);
    auto call = master.Call([&](rpc::MasterServiceClient& c) {
      std::vector<rpc::LocationResult> r;
      c.BatchGetLocation(r, slice_keys);
      return r;
    });
    if (!call) return Err(call.error());
    const std::vector<rpc::LocationResult>& locations = *call;
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
      // As LocateAtMaster does: without this, batch reads of keys written
      // by a batch never find them in the cache and pay this master round
      // trip on every call.
      RememberOwner(keys[slice[j]], loc.node_id);
    }
  }
  return {};
}

std::map<std::string, OwnerGroup> ClientRouter::GroupCached(const std::vector<std::string>& keys,
                                                            const std::vector<size_t>& todo,
                                                            std::vector<size_t>& uncached) {
  std::map<std::string, OwnerGroup> groups;
  for (size_t i : todo) {
    auto node_id = owners_.Find(keys[i]);
    if (!node_id) {
      uncached.push_back(i);
      continue;
    }
    // A batch's keys mostly share a few owners: look each node's channel up
    // once per batch, not once per key under the shared lock.
    auto it = groups.find(*node_id);
    if (it == groups.end()) {
      auto channel = Cached(*node_id);
      if (!channel) {
        uncached.push_back(i);
        continue;
      }
      Owner owner{*node_id, std::move(channel), /*cached=*/true};
      it = groups.emplace(*node_id, OwnerGroup{std::move(owner), {}}).first;
    }
    it->second.indices.push_back(i);
  }
  return groups;
}

Result<Owner> ClientRouter::PickTarget(uint64_t size, const PutOptions& options,
                                       bool& explicit_choice) {
  explicit_choice = !options.preferred_node.empty();
  if (explicit_choice) return Node(options.preferred_node);
  if (!config_.local_node.empty()) {
    if (auto local = LocalNode()) return std::move(*local);
  }
  if (auto reused = ReusePick(size)) return std::move(*reused);
  return PickByMaster(size, {});
}

std::optional<Owner> ClientRouter::LocalNode() {
  int64_t aside_until = local_aside_until_ns_.load(std::memory_order_relaxed);
  if (aside_until != 0 && SteadyNanos() < aside_until) return std::nullopt;
  auto local = Node(config_.local_node);
  if (local) {
    if (aside_until != 0) local_aside_until_ns_.store(0, std::memory_order_relaxed);
    return std::move(*local);
  }
  // The co-located worker may be down or not registered yet; the cluster
  // can still take the object elsewhere.
  SetLocalNodeAside(local.error());
  return std::nullopt;
}

void ClientRouter::SetLocalNodeAside(ErrorCode why) {
  const int64_t now = SteadyNanos();
  const int64_t until =
      now + std::chrono::duration_cast<std::chrono::nanoseconds>(kLocalNodeRetry).count();
  int64_t previous = local_aside_until_ns_.exchange(until, std::memory_order_relaxed);
  // One line per period, whichever thread found the node missing first.
  if (previous == 0 || previous <= now) {
    MC_LOG_WARN("local node unavailable node={} error={}; puts go where the master picks for {} ms",
                config_.local_node, ToString(why), kLocalNodeRetry.count());
  }
}

Result<Owner> ClientRouter::PickByMaster(uint64_t size, const std::vector<std::string>& exclude) {
  auto call = masters_.Any().Call([&](rpc::MasterServiceClient& c) {
    rpc::PickNodeResult r;
    c.PickNode(r, static_cast<int64_t>(size), exclude);
    return r;
  });
  if (!call) return Err(call.error());
  const rpc::PickNodeResult& picked = *call;
  if (picked.code != rpc::ErrorCode::OK) return Err(FromRpc(picked.code));
  if (pick_reuse_.count() > 0) {
    // The master picks by the free space heartbeats report, so until the
    // next heartbeats it would give the same answer; one that skipped a
    // refusing node is the one to keep using.
    uint64_t free = ToNodeRecord(picked.node).free_bytes();
    std::lock_guard lock(pick_mu_);
    recent_pick_ = RecentPick{picked.node.node_id, free > size ? free - size : 0,
                              std::chrono::steady_clock::now()};
  }
  return Remember(picked.node.node_id, picked.node.host, picked.node.port);
}

std::optional<Owner> ClientRouter::ReusePick(uint64_t size) {
  std::string node_id;
  {
    std::lock_guard lock(pick_mu_);
    if (!recent_pick_) return std::nullopt;
    auto age = std::chrono::steady_clock::now() - recent_pick_->at;
    if (age >= pick_reuse_ || size > recent_pick_->free_bytes) {
      return std::nullopt;
    }
    recent_pick_->free_bytes -= size;
    node_id = recent_pick_->node_id;
  }
  auto channel = Cached(node_id);
  if (!channel) return std::nullopt;
  return Owner{std::move(node_id), std::move(channel)};
}

void ClientRouter::ForgetPick(const std::string& node_id, ErrorCode why) {
  {
    std::lock_guard lock(pick_mu_);
    if (recent_pick_ && recent_pick_->node_id == node_id) recent_pick_.reset();
  }
  if (!config_.local_node.empty() && node_id == config_.local_node) {
    SetLocalNodeAside(why);
  }
}

}  // namespace mooncake
