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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
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

// Reads bytes [offset, offset + out.size()) of the object being transferred.
using ObjectReader = std::function<Result<void>(uint64_t offset, std::span<std::byte> out)>;

// The bytes of an object being transferred.
struct ObjectSource {
  ObjectReader read;
  // Where the bytes lie in this process's memory (a DRAM arena), valid for
  // the whole transfer, so an RDMA sender can write from it without a copy;
  // null when they must be read (SSD, VRAM).
  const std::byte* host_address = nullptr;
};

struct ObjectOptions;

// Hands objects to other nodes (inter-node eviction, prefetch to a client's
// node). The worker implements it over Thrift; the backend calls it without
// holding its own lock.
class PeerTransfer {
 public:
  virtual ~PeerTransfer() = default;
  // Streams the object to `target` (empty: the node the master picks by free
  // space, excluding this one) and swaps ownership at the master with
  // UpdateOwner(key, this node, target). Only on success may the caller free
  // its copy; on failure the target's copy has been dropped. With
  // `dram_only` the target must place it in DRAM. Returns the new owner.
  // kNoAvailableHandle when no node has room.
  virtual Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                                       const ObjectOptions& options, const ObjectSource& source,
                                       const std::string& target, bool dram_only) = 0;
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
  // An adopted object not yet confirmed as ours is checked against the
  // master after this long (the sender's UpdateOwner has finished by then).
  Millis adopt_confirm_delay{30000};
  // Default duration of a soft pin.
  Millis soft_pin_ttl{30 * 60 * 1000};
  // Hard-pinned objects placed in a volatile tier are also written to the
  // durable tier, so they survive a worker restart.
  bool hard_pin_write_through = true;
  // A two-phase write not committed within this is discarded.
  Millis put_start_discard_timeout{30000};
};

struct ObjectOptions {
  bool hard_pin = false;
  bool soft_pin = false;
  // How long a soft pin lasts from when the object becomes readable;
  // 0 means BackendOptions::soft_pin_ttl. Capped at kMaxSoftPinTtl.
  Millis soft_pin_ttl{0};
  // Index of the tier a write prefers (for Put with preferred_tier); the
  // backend falls back to lower tiers when it has no room. -1: fastest.
  int preferred_tier = -1;
};

inline constexpr Millis kMaxSoftPinTtl{24 * 3600 * 1000};

// How PutStart treats an existing object of the key.
enum class WriteMode {
  kCreate,  // Put: fails with kObjectAlreadyExists
  kUpsert,  // Upsert: replaces it (in place when the size is unchanged)
  kAdopt,   // inter-node move: stored complete but unowned until confirmed
};

// One slice of an object read by Get.
struct ReadSlice {
  std::string data;
  uint64_t total_size = 0;
  uint64_t version = 0;
};

// Where a write's space was allocated.
struct WriteTarget {
  size_t tier = 0;
  std::string tier_name;
  TierLocation location;
};

// A plan-based write (DESIGN.md section 4): a producer on this node maps
// `region` and writes the object's bytes at `target.location` itself, then
// commits with `epoch`.
struct DirectWritePlan {
  uint64_t epoch = 0;  // the write's handle: CommitDirect and PutRevoke take it
  WriteTarget target;
  SharedRegion region;
  Millis timeout{0};  // discarded unless committed within this
};

// Where a complete object lives, for readers on this node. While `hold`
// lasts the object is neither moved nor evicted; an upsert may still
// rewrite it, which a reader detects by `version` changing.
struct LocatedObject {
  WriteTarget where;
  uint64_t size = 0;
  uint64_t version = 0;
  std::optional<SharedRegion> region;  // absent for tiers that cannot share (SSD)
  Millis hold{0};
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
  uint64_t pinned_bytes = 0;   // bytes of hard-pinned objects placed here
};

struct BackendStats {
  std::vector<TierSnapshot> tiers;
  uint64_t gets = 0;
  uint64_t get_misses = 0;
  uint64_t puts = 0;
  uint64_t removes = 0;
  uint64_t dropped = 0;  // objects dropped from the cluster for lack of space
  uint64_t upserts = 0;
  uint64_t prefetch_started = 0;
  uint64_t prefetch_succeeded = 0;
  uint64_t prefetch_failed = 0;
  uint64_t prefetch_skipped = 0;  // already in DRAM, being written, or queued
  uint64_t moved_out = 0;         // objects handed to another node
  uint64_t moved_in = 0;          // objects adopted from another node
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

  // Enables inter-node moves; without it the last tier drops objects from
  // the cluster when full. Call before serving; `peers` must outlive this.
  void set_peer_transfer(PeerTransfer* peers) { peers_ = peers; }

  // Index of the tier with this name ("dram", "ssd"), or -1.
  int TierIndex(std::string_view name) const;

  // Rebuilds metadata from what durable tiers persisted before the last
  // shutdown. Call once, before serving. Returns the recovered keys.
  std::vector<std::string> Recover();

  // Stores a new object in one call: PutStart + PutChunk + PutEnd.
  Result<void> Put(const std::string& key, std::string_view value, const ObjectOptions& options);

  // Two-phase write. PutStart allocates in the highest tier that can take
  // `size` bytes (demoting colder objects if needed) and returns a handle;
  // PutEnd publishes the object and claims it in the directory.
  Result<uint64_t> PutStart(const std::string& key, uint64_t size, const ObjectOptions& options,
                            WriteMode mode = WriteMode::kCreate, uint64_t adopted_version = 0);
  Result<void> PutChunk(uint64_t handle, uint64_t offset, std::string_view data);
  Result<void> PutEnd(uint64_t handle);
  // Revoking means the writer is done with the space: it is freed at once.
  Result<void> PutRevoke(uint64_t handle);

  // Plan-based write: PutStart restricted to tiers that can share their
  // memory with other local processes (VRAM, DRAM), returning where to
  // write. kTierNotFound when no such tier exists (or preferred_tier names
  // one that cannot share). A plan that is discarded (timeout) or
  // pre-empted keeps its space quarantined for another timeout, so a late
  // producer never writes into another object.
  Result<DirectWritePlan> OpenForWrite(const std::string& key, uint64_t size,
                                       const ObjectOptions& options,
                                       WriteMode mode = WriteMode::kCreate);
  // Publishes a write whose bytes were placed directly (a plan, or an RDMA
  // WRITE into an adopted allocation): PutEnd without counting PutChunks.
  // kIllegalClient when the handle is unknown (pre-empted, discarded) or
  // belongs to another key; an empty `key` skips that check (AdoptEnd).
  Result<void> CommitDirect(uint64_t handle, std::string_view key);
  // Where a pending write's space lies (for senders that write directly).
  Result<WriteTarget> PendingWriteTarget(uint64_t handle) const;
  // Owner-side get_location: grants a lease and, for shareable tiers, holds
  // the placement for the lease. kReplicaIsNotReady while it is written or
  // moved.
  Result<LocatedObject> Locate(const std::string& key);

  // Creates or replaces an object in one call (DESIGN.md "Upsert").
  Result<void> Upsert(const std::string& key, std::string_view value, const ObjectOptions& options);
  // Drops an adopted copy whose ownership swap failed.
  Result<void> AdoptAbort(const std::string& key);

  // Reads [offset, offset + length) of a complete object; length 0 means to
  // the end. At most kRpcChunkBytes are returned. Grants a lease.
  Result<ReadSlice> Get(const std::string& key, uint64_t offset, uint64_t length);
  // True if a complete copy is here. Grants a lease. With `prefetch`, an
  // object only on the last (SSD) tier is queued for promotion to DRAM: to
  // `requester_node` (through PeerTransfer, moving ownership) when given,
  // else, or if that fails, to this node's DRAM.
  Result<bool> Exist(const std::string& key, bool prefetch = false,
                     const std::string& requester_node = "");
  // The node a key recently moved to, if this node handed it over.
  std::string MovedTo(const std::string& key) const;
  // Removes the object here and in the directory. kObjectHasLease while it is
  // read or leased, unless `force`.
  Result<void> Remove(const std::string& key, bool force);
  // Forgets a local copy without telling the directory (another node owns it).
  void DropLocal(const std::string& key);

  // Demotes (or drops, for the last tier) LRU objects of the named tier until
  // its usage is at most `target_ratio` of capacity. Returns bytes freed.
  Result<uint64_t> EvictTier(std::string_view tier_name, double target_ratio);

  Result<ObjectSnapshot> Inspect(const std::string& key) const;
  // Counters and usage; cheap (no scan of the objects), so heartbeats and
  // metric scrapes may call it as often as they like.
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

  // Recency order of one tier's objects: least recently used first. Eviction
  // walks it from the front, so choosing victims costs what it picks, not
  // the size of the node (a node holds millions of KV blocks).
  struct LruEntry {
    SteadyClock::time_point last_access;
    uint64_t object_id;
    const std::string* key;  // the objects_ node's own key: stable until erased
    bool operator<(const LruEntry& other) const {
      return std::tie(last_access, object_id) < std::tie(other.last_access, other.object_id);
    }
  };
  using ObjectMap = std::unordered_map<std::string, Object>;

  struct QuarantinedSpace {
    SteadyClock::time_point until;
    AllocationPtr allocation;
  };

  struct PromotionTask {
    std::string key;
    std::string requester_node;  // prefetch target; empty: this node
    bool prefetch = false;
  };

  // PutStart + PutChunk (in RPC-sized pieces) + PutEnd, revoking on failure.
  Result<uint64_t> StartWrite(const std::string& key, uint64_t size, const ObjectOptions& options,
                              WriteMode mode, uint64_t adopted_version, bool direct);
  // Last tier a plan-based write may use, or -1 when none can share.
  int LastShareableTier() const;
  size_t PrefetchTier() const;
  void QuarantineLocked(AllocationPtr allocation);
  void ReleaseQuarantine();
  Result<void> WriteWhole(const std::string& key, std::string_view value,
                          const ObjectOptions& options, WriteMode mode);
  Result<std::pair<size_t, AllocationPtr>> AllocateIn(size_t first_tier, size_t last_tier,
                                                      uint64_t size, bool allow_drop);
  // Demotes (or, from the last tier, moves out or drops) LRU victims so
  // `bytes` may fit.
  bool MakeRoom(size_t tier, uint64_t bytes, bool allow_drop);
  std::vector<std::string> PickVictims(size_t tier, uint64_t bytes) const;
  // Copies an object into the first of [first_tier, last_tier] with room and
  // switches it there, unless it changed meanwhile.
  bool MoveObject(const std::string& key, size_t first_tier, size_t last_tier, bool allow_drop);
  // Frees an object's space in the last tier: hands it to another node, or
  // drops it from the cluster when no node has room.
  bool EvictFromLastTier(const std::string& key, size_t tier);
  // Hands an object to another node; true once the master names that node.
  Result<void> TransferOut(const std::string& key, const std::string& target, bool dram_only);
  bool DropObject(const std::string& key, size_t tier);
  Result<void> CopyBetweenTiers(const Allocation& from, const Allocation& to, uint64_t size);
  // Writes a hard-pinned object's bytes to the durable tier as well.
  AllocationPtr WriteThrough(const std::string& key, const AllocationPtr& primary, uint64_t size,
                             uint64_t version, const ObjectOptions& options);
  Result<void> FinishPublish(const PendingWrite& write, uint64_t version);
  void ReleaseAbandonedOwnership(const std::vector<std::string>& keys);
  void DiscardExpiredWrites();
  void DemoteAboveWatermarks();
  void RunQueuedPromotions();
  void RunPromotion(const PromotionTask& task);
  void ConfirmAdoptedObjects();
  bool AnyTierAboveHighWatermark() const;
  void SignalWorkLocked();
  void EraseIfSameLocked(const std::string& key, uint64_t object_id);
  // Every change of an object's membership, tier or last access goes through
  // these, so lru_ always indexes exactly the objects in objects_.
  ObjectMap::iterator EmplaceLocked(const std::string& key, Object object);
  void EraseLocked(ObjectMap::iterator it);
  void TouchLocked(Object& object, SteadyClock::time_point now);
  void SetTierLocked(Object& object, size_t tier);
  // Drops a pending write; returns the key if its object was published and
  // so must be released at the master (a revoked upsert leaves it absent).
  // `writer_gone`: the writer itself revoked, so a direct write's space may
  // be reused at once; otherwise it is quarantined.
  std::optional<std::string> RevokeLocked(uint64_t handle, bool writer_gone);
  bool IsEvictableLocked(const Object& object, SteadyClock::time_point now, int pass) const;
  void QueuePromotionLocked(Object& object, PromotionTask task);
  void RememberMoveLocked(const std::string& key, const std::string& node);

  const std::vector<std::unique_ptr<CacheTier>> tiers_;
  OwnerDirectory* const directory_;
  const BackendOptions options_;
  // Per tier: the region local processes may map, if it can share (fixed
  // for the tier's lifetime, so read without the lock).
  std::vector<std::optional<SharedRegion>> shared_regions_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  ObjectMap objects_;                    // guarded by mu_
  std::vector<std::set<LruEntry>> lru_;  // per tier, guarded by mu_
  // Bytes of hard-pinned objects per tier, kept by the helpers above.
  std::vector<uint64_t> pinned_bytes_;                     // guarded by mu_
  std::unordered_map<uint64_t, PendingWrite> pending_;     // guarded by mu_
  std::deque<PromotionTask> promotions_;                   // guarded by mu_
  std::unordered_map<std::string, std::string> moved_to_;  // guarded by mu_
  std::deque<QuarantinedSpace> quarantine_;                // guarded by mu_
  // Adopted copies awaiting confirmation, (key, object id) in adoption order:
  // the ones due are always at the front, so no pass scans every object.
  std::deque<std::pair<std::string, uint64_t>> unconfirmed_adopts_;  // guarded by mu_
  std::deque<std::string> moved_order_;                              // guarded by mu_
  bool work_queued_ = false;                                         // guarded by mu_
  uint64_t next_handle_ = 1;                                         // guarded by mu_
  uint64_t next_object_id_ = 1;                                      // guarded by mu_
  uint64_t next_version_ = 1;                                        // guarded by mu_

  PeerTransfer* peers_ = nullptr;
  std::unique_ptr<TierCounters[]> counters_;
  std::atomic<uint64_t> gets_{0}, get_misses_{0}, puts_{0}, removes_{0}, dropped_{0};
  std::atomic<uint64_t> upserts_{0}, prefetch_started_{0}, prefetch_succeeded_{0};
  std::atomic<uint64_t> prefetch_failed_{0}, prefetch_skipped_{0}, moved_out_{0}, moved_in_{0};
};

}  // namespace mooncake
