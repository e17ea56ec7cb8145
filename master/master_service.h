#pragma once

// The master's whole state: key -> owner NodeID, and the node registry.
// It never learns tiers, offsets or sizes of objects; workers own those.
// Master state is soft: after a restart, workers re-announce their keys.
//
// Keys live in a KeyDirectory (master/key_directory.h) as key -> a small
// integer naming one incarnation of a node: each RegisterNode starts a new
// incarnation, and death or re-registration retires the old one, whose keys
// read as absent at once and are purged before its number is reused.
//
// Thread-safety: every public method is safe to call concurrently. Key
// operations on different keys run in parallel (the directory locks per
// shard); node registration and death briefly exclude key operations, never
// for a pass over the keys.

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
  // A node dead this long leaves the registry (/nodes, ListNodes, /readyz,
  // node_up): a worker that never comes back (decommissioned, or restarted
  // under a new address-based id) is not listed forever. Its keys went at
  // its death; if it comes back it registers as a new node. Zero or less:
  // dead nodes stay listed until they register again or are forgotten by
  // ForgetNode.
  Millis forget_dead_after{Millis(3600 * 1000)};
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
  // One result per key, in order; counts each OBJECT_NOT_FOUND answer in
  // batch_lookup_misses().
  std::vector<Result<KeyLocation>> BatchGetLocation(const std::vector<std::string>& keys) const;
  // Keys BatchGetLocation found no owner for, since start (for the
  // get_misses metric; a single GetLocation's misses are counted by its
  // caller, per request).
  uint64_t batch_lookup_misses() const;

  // Compare-and-set: sets the owner only if the key has none. On conflict
  // returns kObjectAlreadyExists and, if `winner` is given, the owner.
  Result<void> PutOwner(const std::string& key, const std::string& node_id,
                        std::string* winner = nullptr);
  // PutOwner for each key, with one liveness check for the batch. Returns one
  // result per key, in order: OK if `node_id` owns the key after the call
  // (claimed now or already), kObjectAlreadyExists if another node owns it,
  // kInvalidKey for an invalid key (the other keys still proceed),
  // kNoAvailableHandle if the master is out of memory for it. When
  // `node_id` is empty every result is kInvalidParams; when it is not a live
  // node, kNodeNotFound. If `winners` is given it is resized to keys.size()
  // and (*winners)[i] names the owner of keys[i] where the result is
  // kObjectAlreadyExists (empty elsewhere).
  std::vector<Result<void>> BatchPutOwner(const std::vector<std::string>& keys,
                                          const std::string& node_id,
                                          std::vector<std::string>* winners = nullptr);
  // Swaps owner only if it is still `expected` (OK too if it is `new_owner`
  // already: the same hand-over sent again); kObjectNotFound if the key is
  // gone, kNotOwner if a third node owns it, kNodeNotFound if `new_owner` is
  // not a live node.
  Result<void> UpdateOwner(const std::string& key, const std::string& expected,
                           const std::string& new_owner);
  // Removes the key only if `node_id` owns it.
  Result<void> RemoveOwner(const std::string& key, const std::string& node_id);
  // RemoveOwner for each of `keys`, under one look-up of the node; one
  // result per key, in order (kInvalidKey for a key that is not valid).
  std::vector<Result<void>> BatchRemoveOwner(const std::vector<std::string>& keys,
                                             const std::string& node_id);
  // Claims every key that has no owner; returns the keys owned by others.
  Result<std::vector<std::string>> AnnounceKeys(const std::string& node_id,
                                                const std::vector<std::string>& keys);

  // The live node with the most free bytes (at least `size`), not excluded.
  Result<NodeRecord> PickNode(uint64_t size, const std::vector<std::string>& exclude) const;
  std::vector<NodeRecord> ListNodes() const;

  // Declares nodes silent past node_ttl dead and drops their keys, and
  // forgets nodes dead for longer than forget_dead_after. Returns how many
  // nodes died in this call. The server calls it periodically.
  size_t ExpireDeadNodes();
  // Removes a dead node from the registry at once (an operator
  // decommissioning it). Its keys went at its death; if it comes back it
  // registers as a new node. kNodeNotFound for an unknown node,
  // kObjectAlreadyExists for a live one (it is left as it is),
  // kInvalidParams for an empty id.
  Result<void> ForgetNode(const std::string& node_id);

  // Keys in the directory; while a dead node's keys are being purged they
  // still count, though no lookup finds them.
  size_t key_count() const;

  // Up to `limit` keys that start with `prefix` and sort after `after` in
  // byte order, sorted: one page of the directory for the admin API, where
  // the last key of a page is the next page's `after`. Each call scans every
  // key, one directory shard at a time under that shard's shared lock, so
  // writers wait only for one shard's pass. A key present for the whole call
  // is listed if it belongs on the page; one written during it may or may not
  // be.
  std::vector<std::string> ListKeys(std::string_view prefix, std::string_view after,
                                    size_t limit) const;

 private:
  struct State;
  // RemoveOwner's work for a valid key, under index_mu held shared; `me` is
  // the node's live index (kNone: dead or unknown).
  Result<void> RemoveOwnerLocked(const std::string& key, uint32_t me);

  std::unique_ptr<State> state_;
  MasterOptions options_;
};

}  // namespace mooncake
