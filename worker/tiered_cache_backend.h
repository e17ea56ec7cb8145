#pragma once

// TieredCacheBackend: the worker's precise knowledge of its own objects
// (key -> tier, location, size, state, version, pins, readers, lease) and the
// policies that move them between its tiers. Moving inside the node never
// talks to the master; only creating, dropping and removing a key does,
// through the OwnerDirectory the worker supplies.
//
// Data copies never happen under the backend's lock. Tier space is held by
// reference-counted allocations, so a reader or mover that still copies from
// an old location keeps it alive until it finishes: no one ever reads freed
// or reused memory.
//
// Thread-safety: every public method is safe to call concurrently. mu_ guards
// the object map, pending writes and the promotion queue; counters are atomic.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "tiers/cache_tier.h"

namespace mooncake {

// Who owns which key, cluster-wide. The worker implements it over the
// master's Thrift API; the backend calls it without holding its own lock.
class OwnerDirectory {
 public:
  virtual ~OwnerDirectory() = default;
  // Compare-and-set: claims `key` for this node. kObjectAlreadyExists if
  // another node owns it.
  virtual Result<void> Claim(const std::string& key) = 0;
  // Gives up ownership of `key` (only if this node owns it).
  virtual Result<void> Release(const std::string& key) = 0;
};

struct BackendOptions {
  // Background demotion starts above high and stops at low (of capacity).
  double high_watermark = 0.90;
  double low_watermark = 0.80;
  // Reads of an object in a lower tier queue its promotion to the top tier.
  bool promote_on_get = true;
  // Soft-pinned objects may be evicted, but only after every unpinned one.
  bool allow_evict_soft_pinned = true;
  // Each read protects the object from eviction and Remove for this long.
  Millis kv_lease_ttl{10000};
  // A two-phase write not committed within this is discarded.
  Millis put_start_discard_timeout{30000};
};

struct ObjectOptions {
  bool hard_pin = false;
  bool soft_pin = false;
};

// One slice of an object read by Get.
struct ReadSlice {
  std::string data;
  uint64_t total_size = 0;
  uint64_t version = 0;
};

struct ObjectSnapshot {
  std::string tier;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t version = 0;
  bool hard_pinned = false;
  bool soft_pinned = false;
  std::string state;  // "writing", "complete"
  int readers = 0;
  int64_t lease_remaining_ms = 0;
  int64_t idle_ms = 0;
};

struct TierSnapshot {
  std::string name;
  TierKind kind;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t objects = 0;
  uint64_t hits = 0;           // reads served from this tier
  uint64_t promotions_in = 0;  // objects moved up into this tier
  uint64_t demotions_out = 0;  // objects moved down out of this tier
  uint64_t evictions = 0;      // objects dropped from the node out of this tier
};

struct BackendStats {
  std::vector<TierSnapshot> tiers;
  uint64_t gets = 0;
  uint64_t get_misses = 0;
  uint64_t puts = 0;
  uint64_t removes = 0;
  uint64_t dropped = 0;  // objects dropped from the cluster for lack of space
};

class TieredCacheBackend {
 public:
  // `tiers` are ordered fastest first (VRAM, DRAM, SSD); the backend owns
  // them. `directory` must outlive the backend.
  TieredCacheBackend(std::vector<std::unique_ptr<CacheTier>> tiers, OwnerDirectory* directory,
                     BackendOptions options = {});
  ~TieredCacheBackend();
  TieredCacheBackend(const TieredCacheBackend&) = delete;
  TieredCacheBackend& operator=(const TieredCacheBackend&) = delete;

  // Rebuilds metadata from what durable tiers persisted before the last
  // shutdown. Call once, before serving. Returns the recovered keys.
  std::vector<std::string> Recover();

  // Stores a new object in one call: PutStart + PutChunk + PutEnd.
  Result<void> Put(const std::string& key, std::string_view value, const ObjectOptions& options);

  // Two-phase write. PutStart allocates in the highest tier that can take
  // `size` bytes (demoting colder objects if needed) and returns a handle;
  // PutEnd publishes the object and claims it in the directory.
  Result<uint64_t> PutStart(const std::string& key, uint64_t size, const ObjectOptions& options);
  Result<void> PutChunk(uint64_t handle, uint64_t offset, std::string_view data);
  Result<void> PutEnd(uint64_t handle);
  Result<void> PutRevoke(uint64_t handle);

  // Reads [offset, offset + length) of a complete object; length 0 means to
  // the end. At most kRpcChunkBytes are returned. Grants a lease.
  Result<ReadSlice> Get(const std::string& key, uint64_t offset, uint64_t length);
  // True if a complete copy is here. Grants a lease.
  Result<bool> Exist(const std::string& key);
  // Removes the object here and in the directory. kObjectHasLease while it is
  // read or leased, unless `force`.
  Result<void> Remove(const std::string& key, bool force);
  // Forgets a local copy without telling the directory (another node owns it).
  void DropLocal(const std::string& key);

  Result<ObjectSnapshot> Inspect(const std::string& key) const;
  BackendStats Stats() const;
  // Keys of every complete object, for re-announcing to a restarted master.
  std::vector<std::string> Keys() const;

  // Background work: queued promotions, demotion of tiers above their high
  // watermark, and discarding abandoned writes. The worker calls it from one
  // thread after WaitForWork; tests call it directly.
  void RunMaintenance();
  // Blocks until work is queued or `timeout` passes.
  void WaitForWork(Millis timeout);

 private:
  struct Allocation;
  struct Object;
  struct PendingWrite;
  struct TierCounters;
  using AllocationPtr = std::shared_ptr<Allocation>;

  Result<std::pair<size_t, AllocationPtr>> AllocateIn(size_t first_tier, size_t last_tier,
                                                      uint64_t size, bool allow_drop);
  // Demotes (or, from the last tier, drops) LRU victims so `bytes` may fit.
  bool MakeRoom(size_t tier, uint64_t bytes, bool allow_drop);
  std::vector<std::string> PickVictims(size_t tier, uint64_t bytes) const;
  // Copies an object into the first of [first_tier, last_tier] with room and
  // switches it there, unless it changed meanwhile.
  bool MoveObject(const std::string& key, size_t first_tier, size_t last_tier, bool allow_drop);
  // Drops an object from the node and the cluster to free space.
  bool DropObject(const std::string& key, size_t tier);
  Result<void> CopyBetweenTiers(const Allocation& from, const Allocation& to, uint64_t size);
  void DiscardExpiredWrites();
  void DemoteAboveWatermarks();
  void RunQueuedPromotions();
  bool AnyTierAboveHighWatermark() const;
  void SignalWorkLocked();
  void EraseIfSameLocked(const std::string& key, uint64_t object_id);
  bool IsEvictableLocked(const Object& object, SteadyClock::time_point now, int pass) const;
  void QueuePromotionLocked(Object& object, const std::string& key);

  const std::vector<std::unique_ptr<CacheTier>> tiers_;
  OwnerDirectory* const directory_;
  const BackendOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::unordered_map<std::string, Object> objects_;                      // guarded by mu_
  std::unordered_map<uint64_t, PendingWrite> pending_;                   // guarded by mu_
  std::deque<std::string> promotions_;                                   // guarded by mu_
  bool work_queued_ = false;                                             // guarded by mu_
  uint64_t next_handle_ = 1;                                             // guarded by mu_
  uint64_t next_object_id_ = 1;                                          // guarded by mu_
  uint64_t next_version_ = 1;                                            // guarded by mu_

  std::unique_ptr<TierCounters[]> counters_;
  std::atomic<uint64_t> gets_{0}, get_misses_{0}, puts_{0}, removes_{0}, dropped_{0};
};

}  // namespace mooncake
