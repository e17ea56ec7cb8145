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
// The backend composes parts with one concern each (one lock, shared):
//   worker/backend_context.h  tiers, options, directory, peers, counters, mu
//   worker/object_table.h     object map, per-tier LRU, pins, readers and
//                             leases, the object state machine
//   worker/write_path.h       two-phase and plan-based writes, quarantine
//   worker/mover.h            placement, promotion, demotion, eviction,
//                             transfer out, adopt confirmation
//   worker/maintenance.h      the promotion queue and the maintenance pass
// This file keeps reads, removal, recovery and introspection.
//
// Thread-safety: every public method is safe to call concurrently. One mutex
// (BackendContext::mu) guards the object table and every part's queues;
// counters are atomic.

// The standard headers this file has always made available to its users.
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
#include "worker/backend_types.h"

namespace mooncake {

struct BackendContext;
class ObjectTable;
class Mover;
class WorkQueue;
class WritePath;
class Maintenance;

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
  void set_peer_transfer(PeerTransfer* peers);

  // Index of the tier with this name ("dram", "ssd"), or -1.
  int TierIndex(std::string_view name) const;

  // Rebuilds metadata from what durable tiers persisted before the last
  // shutdown. Call once, before serving. Returns the recovered keys.
  std::vector<std::string> Recover();

  // Stores a new object in one call: PutStart + PutChunk + PutEnd.
  Result<void> Put(const std::string& key, std::string_view value, const ObjectOptions& options);
  // Put without waiting on the calling thread for the master's claim: `done`
  // gets the result, here or from the claim's thread. False, with nothing
  // changed and `done` not run, for a put that might wait here (no room in
  // host memory without eviction, a hard pin, a tier outside host memory):
  // use Put. See WritePath::TryWriteWholeAsync.
  bool TryPutAsync(const std::string& key, std::string_view value, const ObjectOptions& options,
                   std::function<void(Result<void>)> done);
  // Put (or Upsert, by each write's mode) of many objects, one result each
  // in order, with their claims sent to the master in one call.
  std::vector<Result<void>> PutMany(const std::vector<WholeWrite>& writes);

  // Two-phase write. PutStart allocates in the highest tier that can take
  // `size` bytes (demoting colder objects if needed) and returns a handle;
  // PutEnd publishes the object and claims it in the directory.
  Result<uint64_t> PutStart(const std::string& key, uint64_t size, const ObjectOptions& options,
                            WriteMode mode = WriteMode::kCreate, const AdoptedFrom& adopted = {});
  Result<void> PutChunk(uint64_t handle, uint64_t offset, std::string_view data);
  Result<void> PutEnd(uint64_t handle);
  // Revoking means the writer is done with the space: it is freed at once.
  Result<void> PutRevoke(uint64_t handle);

  // Put of a value the caller receives straight into the object's space
  // (the worker's RPC reads a large value from its socket into it).
  // StartPlacedPut reserves the key and `size` bytes as PutStart does;
  // kTierNotFound, with nothing reserved, when the space would not be host
  // memory (write the value with Put then). The caller fills `bytes` and
  // publishes with EndPlacedPut, or gives the space back with PutRevoke.
  Result<PlacedWrite> StartPlacedPut(const std::string& key, uint64_t size,
                                     const ObjectOptions& options);
  Result<void> EndPlacedPut(uint64_t handle);

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

  // Creates or replaces an object in one call (docs/design.md, "Upsert").
  Result<void> Upsert(const std::string& key, std::string_view value, const ObjectOptions& options);
  // Drops an adopted copy whose ownership swap failed.
  Result<void> AdoptAbort(const std::string& key);
  // The swap of an adopted copy succeeded (its sender says): the next
  // maintenance pass, started now, confirms it at the master instead of
  // waiting for adopt_confirm_delay. kObjectNotFound when no adopted copy of
  // `key` is here.
  Result<void> ConfirmAdoptSoon(const std::string& key);

  // Reads [offset, offset + length) of a complete object; length 0 means to
  // the end. At most kRpcChunkBytes are returned. Grants a lease.
  Result<ReadSlice> Get(const std::string& key, uint64_t offset, uint64_t length);
  // Get without the copy: passes the slice to `visit` where it lies (a
  // host-memory tier), or from a buffer it was read into (the others). The
  // object stays pinned, so neither moved nor evicted, until `visit`
  // returns; the lock is not held meanwhile. An exception from `visit`
  // passes through, after the pin is released.
  Result<void> ReadInPlace(const std::string& key, uint64_t offset, uint64_t length,
                           const ReadVisitor& visit);
  // A batch read (BatchGet): ReadInPlace(key, 0, kRpcChunkBytes) for each
  // of `keys`, with the same leases, counters and promotions, but every
  // key's piece is passed to `visit` at once, in order, with every readable
  // object pinned until `visit` returns. The keys' bytes together stop at
  // `budget`: a key past it gets its size and version and no bytes. Takes
  // the lock twice per run of keys rather than twice per key, so a batch
  // does not queue on the lock once for every key. An exception from
  // `visit` passes through, after the pins are released.
  void ReadManyInPlace(const std::vector<std::string>& keys, uint64_t budget,
                       const ReadManyVisitor& visit);
  // False when reading one of `keys` now would wait for a tier outside host
  // memory (an SSD read, a GPU copy). Absent or unreadable keys answer at
  // once, so they count as readable. No lease, no counters.
  bool ReadableFromHostMemory(std::span<const std::string> keys) const;
  // True if a complete copy is here. Grants a lease. With `prefetch`, an
  // object only on the last (SSD) tier is queued for promotion to DRAM: to
  // `requester_node` (through PeerTransfer, moving ownership) when given,
  // else, or if that fails, to this node's DRAM.
  Result<bool> Exist(const std::string& key, bool prefetch = false,
                     const std::string& requester_node = "");
  // The node a key recently moved to, if this node handed it over.
  std::string MovedTo(const std::string& key) const;
  // Removes the object here and in the directory. kObjectHasLease while it is
  // read or leased, unless `force`; kObjectReplicaBusy while its claim is in
  // flight or an upsert of it is being written (retry). If the directory
  // cannot be told, the object stays and the error is returned.
  Result<void> Remove(const std::string& key, bool force);
  // Remove for each key, one result each in order, telling the directory
  // of all of them in one call (OwnerDirectory::ReleaseMany).
  std::vector<Result<void>> RemoveMany(const std::vector<std::string>& keys, bool force);
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
  // One being removed or dropped is listed: if that fails, the object stays
  // and the master must know it.
  std::vector<std::string> Keys() const;
  // Those of `keys` not held here (ObjectTable::IsHeld): absent, not yet
  // published, or being removed or dropped. For releasing what an
  // announcement listed but this node is letting go. Takes the lock once
  // per run of keys, as a BatchGet does.
  std::vector<std::string> NotHeld(std::span<const std::string> keys) const;

  // Background work: queued promotions, demotion of tiers above their high
  // watermark, and discarding abandoned writes. The worker calls it from one
  // thread after WaitForWork; tests call it directly.
  void RunMaintenance();
  // Blocks until work is queued or `timeout` passes.
  void WaitForWork(Millis timeout);

 private:
  // A removal after its first step (under ctx_->mu): finished, or waiting
  // for the directory to release the object `object_id`.
  struct PendingRemoval {
    std::optional<Result<void>> done;
    uint64_t object_id = 0;
  };
  // Marks the object removing, or revokes the write of a key the master
  // does not know yet; OBJECT_REPLICA_BUSY for an upsert of an owned key
  // still being written. Caller holds ctx_->mu.
  PendingRemoval BeginRemoveLocked(const std::string& key, bool force);
  // The error a read of `key` that failed with `error` answers: a miss
  // (kObjectNotFound) when its tier found the bytes damaged or lost and the
  // object is dropped for it (Mover::DropIfDamaged), else `error`.
  ErrorCode ReadFailed(const std::string& key, uint64_t offset, ErrorCode error);
  // Erases the object once the directory let it go; when the directory
  // could not be told, leaves it kRemoving for Mover::ClaimKeptCopies.
  // Caller holds ctx_->mu.
  Result<void> FinishRemoveLocked(const std::string& key, uint64_t object_id,
                                  const Result<void>& released);

  // Declared in destruction order's reverse: the parts go before the
  // context, whose tiers must outlive every allocation the parts hold.
  std::unique_ptr<BackendContext> ctx_;
  std::unique_ptr<ObjectTable> table_;  // guarded by ctx_->mu
  std::unique_ptr<Mover> mover_;
  std::unique_ptr<WorkQueue> work_;
  std::unique_ptr<WritePath> writer_;
  std::unique_ptr<Maintenance> maintenance_;
};

}  // namespace mooncake
