#pragma once

// The master's whole state: key -> owner NodeID, and the node registry.
// It never learns tiers, offsets or sizes of objects; workers own those.
// Master state is soft: after a restart, workers re-announce their keys.
//
// Thread-safety: every public method is safe to call concurrently.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/node.h"
#include "common/status.h"

namespace mooncake {

struct KeyLocation {
  std::string node_id;
  std::string host;
  int port = 0;
};

struct MasterOptions {
  // A node silent for this long is declared dead and its keys dropped.
  Millis node_ttl{10000};
  // Source of "now" for liveness; tests substitute a manual clock.
  std::function<SteadyClock::time_point()> now = [] { return SteadyClock::now(); };
};

class MasterService {
 public:
  explicit MasterService(MasterOptions options = {});
  ~MasterService();
  MasterService(const MasterService&) = delete;
  MasterService& operator=(const MasterService&) = delete;

  // Adds or refreshes a node (re-registration after death revives it).
  Result<void> RegisterNode(NodeRecord node);
  // kNodeNotFound for an unknown or dead node: it must register again.
  Result<void> Heartbeat(const std::string& node_id, std::vector<TierUsage> tiers);

  Result<KeyLocation> GetLocation(const std::string& key) const;
  std::vector<Result<KeyLocation>> BatchGetLocation(const std::vector<std::string>& keys) const;

  // Compare-and-set: sets the owner only if the key has none. On conflict
  // returns kObjectAlreadyExists and, if `winner` is given, the owner.
  Result<void> PutOwner(const std::string& key, const std::string& node_id,
                        std::string* winner = nullptr);
  // Swaps owner only if it is still `expected`; kObjectNotFound if the key is
  // gone, kNotOwner if someone else owns it, kNodeNotFound if `new_owner` is
  // not a live node.
  Result<void> UpdateOwner(const std::string& key, const std::string& expected,
                           const std::string& new_owner);
  // Removes the key only if `node_id` owns it.
  Result<void> RemoveOwner(const std::string& key, const std::string& node_id);
  // Claims every key that has no owner; returns the keys owned by others.
  Result<std::vector<std::string>> AnnounceKeys(const std::string& node_id,
                                                const std::vector<std::string>& keys);

  // The live node with the most free bytes (at least `size`), not excluded.
  Result<NodeRecord> PickNode(uint64_t size, const std::vector<std::string>& exclude) const;
  std::vector<NodeRecord> ListNodes() const;

  // Declares nodes silent past node_ttl dead and drops their keys. Returns how
  // many nodes died in this call. The server calls it periodically.
  size_t ExpireDeadNodes();

  size_t key_count() const;

  // Up to `limit` keys that start with `prefix` and sort after `after` in
  // byte order, sorted: one page of the directory for the admin API, where
  // the last key of a page is the next page's `after`. Each call scans every
  // key under the exclusive key lock (the owner map cannot be iterated while
  // written), so key operations wait for one O(keys) pass.
  std::vector<std::string> ListKeys(std::string_view prefix, std::string_view after,
                                    size_t limit) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  MasterOptions options_;
};

}  // namespace mooncake
