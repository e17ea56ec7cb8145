#include "master/master_service.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "common/log.h"
#include "master/key_directory.h"
#include "master/writer_first_mutex.h"

namespace mooncake {
namespace {

// The keys that pass ValidateKey, and where each stands in `keys`
// (valid[j] is keys[at[j]]): batch calls answer the others INVALID_KEY.
struct ValidKeySet {
  std::vector<std::string_view> valid;
  std::vector<size_t> at;
};

ValidKeySet ValidKeys(const std::vector<std::string>& keys) {
  ValidKeySet out;
  out.valid.reserve(keys.size());
  out.at.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ValidateKey(keys[i])) {
      out.valid.push_back(keys[i]);
      out.at.push_back(i);
    }
  }
  return out;
}

constexpr uint32_t kNone = KeyDirectory::kNone;

struct NodeEntry {
  NodeRecord record;
  // Steady time of the last registration or heartbeat; liveness is judged on
  // this, never on the wall clock in record.last_heartbeat_ms.
  SteadyClock::time_point last_seen;
  // Steady time the node was declared dead (meaningful while !record.alive).
  SteadyClock::time_point died_at;
};

// One registration of a node, as the key directory names it (by index).
// Addresses are copied here so that lookups never touch the node registry.
struct Incarnation {
  std::string node_id;  // empty while the index is free
  std::string host;
  int port = 0;
  bool live = false;  // false: free, or retired with its keys being purged
};

}  // namespace

// Two locks, taken in this order: index_mu, then nodes_mu (then the key
// directory's shard locks, which are innermost).
//
// index_mu guards the incarnation table. Key operations hold it shared from
// the liveness check to the directory write, and a node's incarnation is
// retired only under it exclusive; so once RetireLocked returns no claim for
// the retired index is in flight or can start, and the purge that follows
// (run without any service lock, one directory shard at a time) cannot miss
// a key: a node cannot die and be purged between a liveness check and an
// insert. A retired index reads as "no owner" until its purge ends, and only
// then returns to the free list, so a stale index read under index_mu can
// never name a different node.
//
// nodes_mu guards the registry (heartbeats, usage, PickNode); heartbeats
// take only it, so they never wait behind key traffic.
//
// index_mu prefers writers (writer_first_mutex.h): with std::shared_mutex,
// lookups on many connections kept it held shared without a break and a
// registration or the reaper waited seconds for it. No thread takes it
// shared twice.
struct MasterService::State {
  KeyDirectory keys;

  mutable WriterFirstSharedMutex index_mu;
  std::vector<Incarnation> incarnations;                 // guarded by index_mu
  std::vector<uint32_t> free_indexes;                    // guarded by index_mu
  std::unordered_map<std::string, uint32_t> live_index;  // node id -> live index; index_mu

  // Keys BatchGetLocation answered OBJECT_NOT_FOUND; relaxed, a metric only.
  std::atomic<uint64_t> batch_lookup_misses{0};

  mutable std::mutex nodes_mu;
  std::map<std::string, NodeEntry> nodes;  // guarded by nodes_mu; sorted for stable listings

  // Caller holds index_mu (any mode). kNone when the node is not alive.
  uint32_t LiveIndex(const std::string& node_id) const {
    auto it = live_index.find(node_id);
    return it == live_index.end() ? kNone : it->second;
  }

  // Caller holds index_mu (any mode).
  bool IsLive(uint32_t index) const {
    return index != kNone && index < incarnations.size() && incarnations[index].live;
  }

  // Caller holds index_mu exclusive. Starts a new incarnation of the node.
  uint32_t NewIndexLocked(const NodeRecord& node) {
    uint32_t index;
    if (free_indexes.empty()) {
      index = static_cast<uint32_t>(incarnations.size());
      incarnations.emplace_back();
    } else {
      index = free_indexes.back();
      free_indexes.pop_back();
    }
    incarnations[index] = Incarnation{node.node_id, node.host, node.port, true};
    live_index[node.node_id] = index;
    return index;
  }

  // Caller holds index_mu exclusive. Retires the node's live incarnation, if
  // any, and returns its index (kNone if none) for PurgeAndFree.
  uint32_t RetireLocked(const std::string& node_id) {
    auto it = live_index.find(node_id);
    if (it == live_index.end()) return kNone;
    uint32_t index = it->second;
    incarnations[index].live = false;
    live_index.erase(it);
    return index;
  }

  // Drops every key of retired incarnations, then frees their indexes.
  // Returns how many keys each lost. Takes no service lock while purging.
  std::vector<size_t> PurgeAndFree(const std::vector<uint32_t>& retired) {
    std::vector<size_t> dropped;
    keys.RemoveOwners(retired, &dropped);
    std::unique_lock lock(index_mu);
    for (uint32_t index : retired) {
      incarnations[index] = Incarnation{};
      free_indexes.push_back(index);
    }
    return dropped;
  }

  // Caller holds index_mu (any mode).
  Result<KeyLocation> Resolve(uint32_t owner) const {
    if (!IsLive(owner)) return Err(ErrorCode::kObjectNotFound);
    const Incarnation& inc = incarnations[owner];
    return KeyLocation{inc.node_id, inc.host, inc.port};
  }

  // Caller holds index_mu shared and has resolved `me` as a live index.
  // Returns the key's owner after the call (`me` if claimed), kNone if the
  // directory could not store it. A key owned by a retired incarnation is
  // absent in effect (its purge is under way) and is taken over.
  uint32_t ClaimLocked(std::string_view key, uint32_t me, uint32_t owner) {
    while (owner != me && owner != kNone && !IsLive(owner)) {
      uint32_t before = keys.CompareAndSwap(key, owner, me);
      if (before == owner) return me;
      // The purge or another claim got there first: look again.
      owner = keys.Claim(key, me);
    }
    return owner;
  }

  // Caller holds index_mu shared, `me` live. Claims every key for `me`, each
  // directory shard locked once; owners[i] gets keys[i]'s owner after the call.
  void ClaimManyLocked(std::span<const std::string_view> keys_in, uint32_t me,
                       std::span<uint32_t> owners) {
    keys.ClaimMany(keys_in, me, owners);
    for (size_t i = 0; i < keys_in.size(); ++i) {
      owners[i] = ClaimLocked(keys_in[i], me, owners[i]);
    }
  }

  // Whether ExpireDeadNodes has work: a live node silent past `ttl`, or a
  // dead one due to be forgotten.
  bool AnyExpired(SteadyClock::time_point now, Millis ttl, Millis forget) const {
    std::lock_guard lock(nodes_mu);
    return std::ranges::any_of(nodes, [&](const auto& kv) {
      const NodeEntry& e = kv.second;
      return e.record.alive ? now - e.last_seen > ttl : ForgetDue(e, now, forget);
    });
  }

  static bool ForgetDue(const NodeEntry& e, SteadyClock::time_point now, Millis forget) {
    return !e.record.alive && forget > Millis(0) && now - e.died_at > forget;
  }

  // Forgets dead nodes due to be; returns their ids. Takes nodes_mu.
  std::vector<std::string> ForgetDueNodes(SteadyClock::time_point now, Millis forget) {
    std::vector<std::string> gone;
    std::lock_guard lock(nodes_mu);
    std::erase_if(nodes, [&](const auto& kv) {
      if (!ForgetDue(kv.second, now, forget)) return false;
      gone.push_back(kv.first);
      return true;
    });
    return gone;
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
  uint32_t stale = kNone;
  {
    // A node registers when it starts and after the master forgot it; either
    // way it announces every key it holds right after. Keys the master still
    // lists for it may be gone (a restart loses DRAM), so its old incarnation
    // is retired (its keys read as absent from now on) and purged below; the
    // announcement rebuilds the true set under the new one.
    std::unique_lock index(state_->index_mu);
    std::lock_guard lock(state_->nodes_mu);
    auto [it, inserted] = state_->nodes.try_emplace(id);
    revived = !inserted && !it->second.record.alive;
    stale = state_->RetireLocked(id);
    state_->NewIndexLocked(node);
    it->second.record = std::move(node);
    it->second.last_seen = options_.now();
  }
  size_t forgotten = 0;
  if (stale != kNone) forgotten = state_->PurgeAndFree({stale})[0];
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
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::shared_lock index(state_->index_mu);
  return state_->Resolve(state_->keys.Find(key));
}

std::vector<Result<KeyLocation>> MasterService::BatchGetLocation(
    const std::vector<std::string>& keys) const {
  std::vector<Result<KeyLocation>> results(keys.size(), Err(ErrorCode::kInvalidKey));
  auto [valid, at] = ValidKeys(keys);
  std::vector<uint32_t> owners(valid.size());
  std::shared_lock index(state_->index_mu);
  state_->keys.FindMany(valid, owners);
  uint64_t misses = 0;
  for (size_t j = 0; j < valid.size(); ++j) {
    results[at[j]] = state_->Resolve(owners[j]);
    if (!results[at[j]]) ++misses;
  }
  if (misses) state_->batch_lookup_misses.fetch_add(misses, std::memory_order_relaxed);
  return results;
}

uint64_t MasterService::batch_lookup_misses() const {
  return state_->batch_lookup_misses.load(std::memory_order_relaxed);
}

Result<void> MasterService::PutOwner(const std::string& key, const std::string& node_id,
                                     std::string* winner) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock index(state_->index_mu);
  uint32_t me = state_->LiveIndex(node_id);
  if (me == kNone) return Err(ErrorCode::kNodeNotFound);
  uint32_t owner = state_->ClaimLocked(key, me, state_->keys.Claim(key, me));
  if (owner == me) return {};
  if (owner == kNone) return Err(ErrorCode::kNoAvailableHandle);
  if (winner) *winner = state_->incarnations[owner].node_id;
  return Err(ErrorCode::kObjectAlreadyExists);
}

std::vector<Result<void>> MasterService::BatchPutOwner(const std::vector<std::string>& keys,
                                                       const std::string& node_id,
                                                       std::vector<std::string>* winners) {
  if (winners) winners->assign(keys.size(), std::string());
  if (node_id.empty())
    return std::vector<Result<void>>(keys.size(), Err(ErrorCode::kInvalidParams));
  std::vector<Result<void>> results(keys.size(), Err(ErrorCode::kInvalidKey));
  auto [valid, at] = ValidKeys(keys);
  std::vector<uint32_t> owners(valid.size());
  std::shared_lock index(state_->index_mu);
  uint32_t me = state_->LiveIndex(node_id);
  if (me == kNone) return std::vector<Result<void>>(keys.size(), Err(ErrorCode::kNodeNotFound));
  state_->ClaimManyLocked(valid, me, owners);
  for (size_t j = 0; j < valid.size(); ++j) {
    Result<void>& result = results[at[j]];
    if (owners[j] == me) {
      result = {};
    } else if (owners[j] == kNone) {
      result = Err(ErrorCode::kNoAvailableHandle);
    } else {
      result = Err(ErrorCode::kObjectAlreadyExists);
      if (winners) (*winners)[at[j]] = state_->incarnations[owners[j]].node_id;
    }
  }
  return results;
}

Result<void> MasterService::UpdateOwner(const std::string& key, const std::string& expected,
                                        const std::string& new_owner) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (expected.empty() || new_owner.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock index(state_->index_mu);
  uint32_t from = state_->LiveIndex(expected);
  uint32_t to = state_->LiveIndex(new_owner);
  if (from == kNone || to == kNone) return Err(ErrorCode::kNodeNotFound);
  uint32_t before = state_->keys.CompareAndSwap(key, from, to);
  // Owned by `new_owner` already: this hand-over, applied once and sent
  // again (a retried call whose first answer was lost). Answering "not the
  // owner" would make the sender drop its copy and the target its adopted
  // one, with the master naming the target.
  if (before == from || before == to) return {};
  // A retired incarnation's key is already gone as far as callers can tell.
  return Err(state_->IsLive(before) ? ErrorCode::kNotOwner : ErrorCode::kObjectNotFound);
}

Result<void> MasterService::RemoveOwner(const std::string& key, const std::string& node_id) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  std::shared_lock index(state_->index_mu);
  return RemoveOwnerLocked(key, state_->LiveIndex(node_id));
}

std::vector<Result<void>> MasterService::BatchRemoveOwner(const std::vector<std::string>& keys,
                                                          const std::string& node_id) {
  if (node_id.empty())
    return std::vector<Result<void>>(keys.size(), Err(ErrorCode::kInvalidParams));
  std::vector<Result<void>> results;
  results.reserve(keys.size());
  std::shared_lock index(state_->index_mu);
  uint32_t me = state_->LiveIndex(node_id);
  for (const auto& key : keys) {
    auto valid = ValidateKey(key);
    results.push_back(valid ? RemoveOwnerLocked(key, me) : valid);
  }
  return results;
}

Result<void> MasterService::RemoveOwnerLocked(const std::string& key, uint32_t me) {
  // A dead or unknown node owns nothing: look, never remove.
  uint32_t before = me == kNone ? state_->keys.Find(key) : state_->keys.RemoveIf(key, me);
  if (me != kNone && before == me) return {};
  return Err(state_->IsLive(before) ? ErrorCode::kNotOwner : ErrorCode::kObjectNotFound);
}

Result<std::vector<std::string>> MasterService::AnnounceKeys(const std::string& node_id,
                                                             const std::vector<std::string>& keys) {
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  // Validate everything first so a bad key leaves the map untouched.
  for (const auto& key : keys) {
    if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  }
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<uint32_t> owners(keys.size());
  std::vector<std::string> rejected;
  {
    std::shared_lock index(state_->index_mu);
    uint32_t me = state_->LiveIndex(node_id);
    if (me == kNone) return Err(ErrorCode::kNodeNotFound);
    state_->ClaimManyLocked(views, me, owners);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (owners[i] != me) rejected.push_back(keys[i]);
    }
  }
  // An announcement is a sign of life: a worker announcing millions of keys
  // sends no heartbeat until it is done, and must not be declared dead (its
  // keys purged, its announcement refused) halfway through.
  {
    std::lock_guard lock(state_->nodes_mu);
    auto it = state_->nodes.find(node_id);
    if (it != state_->nodes.end() && it->second.record.alive) it->second.last_seen = options_.now();
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
  // Cheap check first: the exclusive index lock briefly stalls every key
  // operation, and the reaper calls this several times per TTL. The purge
  // itself runs after that lock is released.
  if (!state_->AnyExpired(now, options_.node_ttl, options_.forget_dead_after)) return 0;
  // A dead node holds no key (they went at its death, below), so it leaves
  // the registry under nodes_mu alone.
  for (const auto& id : state_->ForgetDueNodes(now, options_.forget_dead_after)) {
    MC_LOG_INFO("dead node forgotten node={} dead_for_more_than_ms={}", id,
                options_.forget_dead_after.count());
  }
  std::vector<std::string> dead;
  std::vector<uint32_t> retired;
  {
    std::unique_lock index(state_->index_mu);
    std::lock_guard lock(state_->nodes_mu);
    for (auto& [id, entry] : state_->nodes) {
      if (entry.record.alive && now - entry.last_seen > options_.node_ttl) {
        entry.record.alive = false;
        entry.died_at = now;
        dead.push_back(id);
        retired.push_back(state_->RetireLocked(id));
      }
    }
  }
  if (dead.empty()) return 0;
  // Every alive node has a live incarnation, so no entry of `retired` is kNone.
  std::vector<size_t> dropped = state_->PurgeAndFree(retired);
  for (size_t i = 0; i < dead.size(); ++i) {
    MC_LOG_WARN("node dead node={} ttl_ms={} keys_dropped={}", dead[i], options_.node_ttl.count(),
                dropped[i]);
  }
  return dead.size();
}

Result<void> MasterService::ForgetNode(const std::string& node_id) {
  if (node_id.empty()) return Err(ErrorCode::kInvalidParams);
  {
    std::lock_guard lock(state_->nodes_mu);
    auto it = state_->nodes.find(node_id);
    if (it == state_->nodes.end()) return Err(ErrorCode::kNodeNotFound);
    // Alive means it has a live incarnation that owns keys: it must die (or
    // be stopped) first. A dead one was retired and purged at its death.
    if (it->second.record.alive) return Err(ErrorCode::kObjectAlreadyExists);
    state_->nodes.erase(it);
  }
  MC_LOG_INFO("dead node forgotten node={} by=operator", node_id);
  return {};
}

size_t MasterService::key_count() const { return state_->keys.size(); }

std::vector<std::string> MasterService::ListKeys(std::string_view prefix, std::string_view after,
                                                 size_t limit) const {
  if (limit == 0) return {};
  // Which indexes are live now; an index allocated later is a new, live
  // incarnation. Taken first so the scan holds no service lock.
  std::vector<bool> live;
  {
    std::shared_lock index(state_->index_mu);
    live.reserve(state_->incarnations.size());
    for (const auto& inc : state_->incarnations) live.push_back(inc.live);
  }
  // A max-heap of the `limit` smallest matches: one pass, memory bounded by
  // the page, and only candidates that make the page are copied.
  std::priority_queue<std::string> page;
  state_->keys.ForEach([&](std::string_view key, uint32_t owner) {
    if (owner < live.size() && !live[owner]) return;
    if (!key.starts_with(prefix) || key <= after) return;
    if (page.size() < limit) {
      page.emplace(key);
    } else if (key < page.top()) {
      page.pop();
      page.emplace(key);
    }
  });
  std::vector<std::string> out(page.size());
  for (size_t i = out.size(); i-- > 0; page.pop()) out[i] = page.top();
  return out;
}

}  // namespace mooncake
