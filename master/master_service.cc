#include "master/master_service.h"

#include <tbb/concurrent_hash_map.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_set>
#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

struct NodeEntry {
  NodeRecord record;
  // Steady time of the last registration or heartbeat; liveness is judged on
  // this, never on the wall clock in record.last_heartbeat_ms.
  SteadyClock::time_point last_seen;
};

using OwnerMap = tbb::concurrent_hash_map<std::string, std::string>;

}  // namespace

// Lock order: keys_mu, then nodes_mu. Every key operation holds keys_mu shared
// for its whole check-then-write, so a node cannot die and be purged between
// the liveness check and the insert (which would leave a dead node owning a
// key). ExpireDeadNodes holds keys_mu exclusive because iterating OwnerMap is
// unsafe while other threads modify it.
struct MasterService::State {
  mutable std::shared_mutex keys_mu;
  OwnerMap owners;  // key -> owner node id; writes need keys_mu (shared is enough)

  mutable std::mutex nodes_mu;
  std::map<std::string, NodeEntry> nodes;  // guarded by nodes_mu; sorted for stable listings

  // Caller holds nodes_mu.
  bool IsAliveLocked(const std::string& node_id) const {
    auto it = nodes.find(node_id);
    return it != nodes.end() && it->second.record.alive;
  }

  bool IsAlive(const std::string& node_id) const {
    std::lock_guard lock(nodes_mu);
    return IsAliveLocked(node_id);
  }

  // Caller holds keys_mu (any mode).
  Result<KeyLocation> Locate(const std::string& key) const {
    if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
    std::string owner;
    {
      OwnerMap::const_accessor acc;
      if (!owners.find(acc, key)) return Err(ErrorCode::kObjectNotFound);
      owner = acc->second;
    }
    std::lock_guard lock(nodes_mu);
    auto it = nodes.find(owner);
    // Owners are live nodes by invariant; guard anyway rather than hand out
    // an address we do not know.
    if (it == nodes.end()) return Err(ErrorCode::kObjectNotFound);
    return KeyLocation{owner, it->second.record.host, it->second.record.port};
  }

  // Caller holds keys_mu shared and has checked that node_id is alive.
  // Returns true if node_id owns the key after the call.
  bool ClaimLocked(const std::string& key, const std::string& node_id, std::string* winner) {
    OwnerMap::accessor acc;
    if (owners.insert(acc, key)) {
      acc->second = node_id;
      return true;
    }
    if (winner) *winner = acc->second;
    return acc->second == node_id;
  }

  // Caller holds keys_mu exclusive. Marks expired nodes dead; returns their ids.
  std::unordered_set<std::string> MarkExpired(SteadyClock::time_point now, Millis ttl) {
    std::unordered_set<std::string> dead;
    std::lock_guard lock(nodes_mu);
    for (auto& [id, entry] : nodes) {
      if (entry.record.alive && now - entry.last_seen > ttl) {
        entry.record.alive = false;
        dead.insert(id);
      }
    }
    return dead;
  }

  bool AnyExpired(SteadyClock::time_point now, Millis ttl) const {
    std::lock_guard lock(nodes_mu);
    return std::ranges::any_of(nodes, [&](const auto& kv) {
      return kv.second.record.alive && now - kv.second.last_seen > ttl;
    });
  }

  // Caller holds keys_mu exclusive: no concurrent writer, so iterating is safe.
  // Returns how many keys each dead node lost.
  std::map<std::string, size_t> PurgeKeys(const std::unordered_set<std::string>& dead) {
    std::vector<std::string> doomed;
    std::map<std::string, size_t> dropped;
    for (const auto& [key, owner] : owners) {
      if (dead.contains(owner)) {
        doomed.push_back(key);
        ++dropped[owner];
      }
    }
    for (const auto& key : doomed) owners.erase(key);
    return dropped;
  }
};

MasterService::MasterService(MasterOptions options)
    : state_(std::make_unique<State>()), options_(std::move(options)) {}

MasterService::~MasterService() = default;

Result<void> MasterService::RegisterNode(NodeRecord node) {
  if (node.node_id.empty() || node.host.empty() || node.port <= 0 || node.port > 65535) {
    return Err(ErrorCode::kInvalidParams);
  }
  node.alive = true;
  node.last_heartbeat_ms = WallMillis();
  // Copied for the log line, which is written outside the lock.
  std::string id = node.node_id, host = node.host;
  int port = node.port;
  uint64_t free = node.free_bytes();
  bool revived = false;
  size_t forgotten = 0;
  {
    // A node registers when it starts and after the master forgot it; either
    // way it announces every key it holds right after. Keys the master still
    // lists for it may be gone (a restart loses DRAM), so they are dropped
    // here and the announcement rebuilds the true set.
    std::unique_lock keys(state_->keys_mu);
    std::lock_guard lock(state_->nodes_mu);
    auto [it, inserted] = state_->nodes.try_emplace(id);
    revived = !inserted && !it->second.record.alive;
    if (!inserted) {
      auto dropped = state_->PurgeKeys({id});
      forgotten = dropped.empty() ? 0 : dropped.begin()->second;
    }
    it->second.record = std::move(node);
    it->second.last_seen = options_.now();
  }
  MC_LOG_INFO("node registered node={} host={} port={} free_bytes={} revived={} keys_forgotten={}",
              id, host, port, free, revived, forgotten);
  return {};
}

Result<void> MasterService::Heartbeat(const std::string& node_id, std::vector<TierUsage> tiers) {
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  std::lock_guard lock(state_->nodes_mu);
  auto it = state_->nodes.find(node_id);
  if (it == state_->nodes.end() || !it->second.record.alive) return Err(ErrorCode::kNodeNotFound);
  it->second.record.tiers = std::move(tiers);
  it->second.record.last_heartbeat_ms = WallMillis();
  it->second.last_seen = options_.now();
  return {};
}

Result<KeyLocation> MasterService::GetLocation(const std::string& key) const {
  std::shared_lock keys(state_->keys_mu);
  return state_->Locate(key);
}

std::vector<Result<KeyLocation>> MasterService::BatchGetLocation(
    const std::vector<std::string>& keys) const {
  std::vector<Result<KeyLocation>> results;
  results.reserve(keys.size());
  std::shared_lock lock(state_->keys_mu);
  for (const auto& key : keys) results.push_back(state_->Locate(key));
  return results;
}

Result<void> MasterService::PutOwner(const std::string& key, const std::string& node_id,
                                     std::string* winner) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock keys(state_->keys_mu);
  if (!state_->IsAlive(node_id)) return Err(ErrorCode::kNodeNotFound);
  std::string owner;
  if (state_->ClaimLocked(key, node_id, &owner)) return {};
  if (winner) *winner = std::move(owner);
  return Err(ErrorCode::kObjectAlreadyExists);
}

Result<void> MasterService::UpdateOwner(const std::string& key, const std::string& expected,
                                        const std::string& new_owner) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (expected.empty() || new_owner.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock keys(state_->keys_mu);
  {
    std::lock_guard lock(state_->nodes_mu);
    if (!state_->IsAliveLocked(expected) || !state_->IsAliveLocked(new_owner)) {
      return Err(ErrorCode::kNodeNotFound);
    }
  }
  OwnerMap::accessor acc;
  if (!state_->owners.find(acc, key)) return Err(ErrorCode::kObjectNotFound);
  if (acc->second != expected) return Err(ErrorCode::kNotOwner);
  acc->second = new_owner;
  return {};
}

Result<void> MasterService::RemoveOwner(const std::string& key, const std::string& node_id) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock keys(state_->keys_mu);
  OwnerMap::accessor acc;
  if (!state_->owners.find(acc, key)) return Err(ErrorCode::kObjectNotFound);
  if (acc->second != node_id) return Err(ErrorCode::kNotOwner);
  state_->owners.erase(acc);
  return {};
}

Result<std::vector<std::string>> MasterService::AnnounceKeys(const std::string& node_id,
                                                             const std::vector<std::string>& keys) {
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  // Validate everything first so a bad key leaves the map untouched.
  for (const auto& key : keys) {
    if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  }
  std::shared_lock lock(state_->keys_mu);
  if (!state_->IsAlive(node_id)) return Err(ErrorCode::kNodeNotFound);
  std::vector<std::string> rejected;
  for (const auto& key : keys) {
    if (!state_->ClaimLocked(key, node_id, nullptr)) rejected.push_back(key);
  }
  MC_LOG_INFO("keys announced node={} keys={} rejected={}", node_id, keys.size(), rejected.size());
  return rejected;
}

Result<NodeRecord> MasterService::PickNode(uint64_t size,
                                           const std::vector<std::string>& exclude) const {
  std::lock_guard lock(state_->nodes_mu);
  const NodeRecord* best = nullptr;
  for (const auto& [id, entry] : state_->nodes) {
    const NodeRecord& rec = entry.record;
    if (!rec.alive || std::ranges::find(exclude, id) != exclude.end()) continue;
    uint64_t free = rec.free_bytes();
    // Strictly greater: on a tie the smallest id wins, which keeps picks stable.
    if (free >= size && (!best || free > best->free_bytes())) best = &rec;
  }
  if (!best) return Err(ErrorCode::kNoAvailableHandle);
  return *best;
}

std::vector<NodeRecord> MasterService::ListNodes() const {
  std::lock_guard lock(state_->nodes_mu);
  std::vector<NodeRecord> nodes;
  nodes.reserve(state_->nodes.size());
  for (const auto& [id, entry] : state_->nodes) nodes.push_back(entry.record);
  return nodes;
}

size_t MasterService::ExpireDeadNodes() {
  auto now = options_.now();
  // Cheap check first: the exclusive lock stalls every key operation, and
  // the reaper calls this several times per TTL.
  if (!state_->AnyExpired(now, options_.node_ttl)) return 0;
  std::map<std::string, size_t> dropped;
  std::unordered_set<std::string> dead;
  {
    std::unique_lock keys(state_->keys_mu);
    dead = state_->MarkExpired(now, options_.node_ttl);
    dropped = state_->PurgeKeys(dead);
  }
  for (const auto& id : dead) {
    MC_LOG_WARN("node dead node={} ttl_ms={} keys_dropped={}", id, options_.node_ttl.count(),
                dropped[id]);
  }
  return dead.size();
}

size_t MasterService::key_count() const { return state_->owners.size(); }

std::vector<std::string> MasterService::ListKeys(std::string_view prefix, std::string_view after,
                                                 size_t limit) const {
  if (limit == 0) return {};
  // A max-heap of the `limit` smallest matches: one pass, memory bounded by
  // the page, and only candidates that make the page are copied.
  std::priority_queue<std::string> page;
  {
    std::unique_lock keys(state_->keys_mu);
    for (const auto& [key, owner] : state_->owners) {
      std::string_view k = key;
      if (!k.starts_with(prefix) || k <= after) continue;
      if (page.size() < limit) {
        page.emplace(key);
      } else if (k < page.top()) {
        page.pop();
        page.emplace(key);
      }
    }
  }
  std::vector<std::string> out(page.size());
  for (size_t i = out.size(); i-- > 0; page.pop()) out[i] = page.top();
  return out;
}

}  // namespace mooncake
