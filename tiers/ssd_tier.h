#pragma once

// A durable tier over RocksDB. Each object gets a monotonic u64 id (its
// TierLocation::offset); its bytes are stored as fixed-size chunk records in
// the "default" column family (integrated BlobDB keeps the large values out of
// the LSM tree) and its DurableObjectMeta in the "meta" column family. An
// object counts as committed once its meta is persisted: on Open, chunks with
// no meta (writes cut short by a crash) are deleted and used() is recomputed
// from the meta records.
//
// Thread-safety: Allocate/Free/Persist bookkeeping (live ids, used bytes, the
// next id) is guarded by mu_. RocksDB calls are thread-safe on their own.
// Read-modify-write of a partially written chunk holds one of rmw_mu_ (striped
// by chunk), so concurrent Writes to different bytes of one chunk do not lose
// each other's bytes; Persist and Free of one id are ordered by object_mu_.
//
// Deletes: when RocksDB cannot take an object's delete (no room for the
// tombstones), the id is recorded in a preallocated file beside the database
// (ssd_format::kDeferredDeletesFile) and the delete is retried before later
// writes, at close and at the next Open. Until it lands the object is not
// live: used() does not count it and Recover() does not return it, also after
// a restart.
//
// Faults (docs/design.md, "Tiers"): a write that the disk has no room for fails
// with kNoAvailableHandle and writes nothing, before RocksDB sees ENOSPC
// (RocksDB stops all writes after a failed WAL append, and an
// assertion-enabled librocksdb aborts on the next one). Every read verifies
// block and blob checksums, so damaged bytes become kInternalError, never
// data. Open fails, with the RocksDB status in *error, on a database it cannot
// trust (corrupt or missing CURRENT/MANIFEST/table files).
//
// Reclaiming space: the bytes of freed objects stay on disk until RocksDB
// flushes the memtables holding their tombstones (and deletes the WALs) and
// compacts away the blob files they point into. Its own triggers for that are
// writes, which a short disk refuses, so a refused data write, and a Free while
// the disk is short, ask a background thread to flush and compact (at most
// once per kReclaimInterval). Without it a tier that once filled refused every
// write until a restart, even after all its objects were freed.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "tiers/cache_tier.h"

// Forward declarations keep RocksDB's headers out of everyone who includes
// this one (they are heavy to compile).
namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace mooncake {

class SsdTier : public CacheTier {
 public:
  // Size of one data record. Large enough that per-record overhead is
  // negligible, small enough that reads and partial writes stay cheap and a
  // large object never has to sit in memory whole.
  static constexpr uint64_t kChunkBytes = 1ull << 20;
  // Values at least this large go to blob files instead of the LSM tree.
  static constexpr uint64_t kMinBlobBytes = 64ull << 10;

  // Data writes leave at least this much of the file system free (beyond
  // what the memtables will need when they are flushed), so RocksDB's own
  // files (WAL, MANIFEST, LOG) and small metadata writes still fit.
  static constexpr uint64_t kDataWriteReserveBytes = 1ull << 20;
  // Metadata writes (Persist, Free) leave at least this much free.
  static constexpr uint64_t kMetaWriteReserveBytes = 64ull << 10;
  // Least time between two reclaim passes (flush and compaction): a disk that
  // stays short does not keep RocksDB rewriting its tables back to back.
  static constexpr std::chrono::milliseconds kReclaimInterval{1000};

  // Opens (creating if needed) the database at `path`, deletes chunks of
  // objects that were never persisted, and recomputes used() from the
  // persisted metas. Objects whose meta a newer release wrote (a rollback)
  // are left on disk untouched, neither live nor counted, and their ids are
  // not reused; a damaged meta is deleted with its object's data. `capacity` (> 0) limits the
  // logical bytes allocated. A missing or empty directory is a fresh, empty tier: the directory and
  // its parents are created. On failure `error` (if given) gets one line
  // naming the path and the reason, e.g.
  // "path=/var/ssd status=Corruption: CURRENT file corrupted" or
  // "path=/x/ssd status=cannot create directory: Permission denied".
  static Result<std::unique_ptr<SsdTier>> Open(std::string name, std::string path,
                                               uint64_t capacity, std::string* error = nullptr);

  ~SsdTier() override;
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  std::string_view name() const override { return name_; }
  TierKind kind() const override { return TierKind::kSsd; }
  uint64_t capacity() const override { return capacity_; }
  uint64_t used() const override;
  uint64_t object_count() const override;

  // Reserves `size` logical bytes and returns a fresh id; writes nothing.
  Result<TierLocation> Allocate(uint64_t size) override;
  // Deletes the object's chunks and meta record and releases its bytes.
  void Free(const TierLocation& location) override;
  bool Damaged(const TierLocation& location) const override;
  // Chunk-aligned writes that cover whole chunks are blind puts; partial
  // chunks are read, patched and rewritten.
  Result<void> Write(const TierLocation& location, uint64_t offset,
                     std::span<const std::byte> data) override;
  // Writes nothing and fails with kNoAvailableHandle when the file system
  // lacks room; other storage errors are kInternalError.
  //
  // Fails with kInternalError if a chunk in the range was never written or
  // fails its checksum (corrupt on disk).
  Result<void> Read(const TierLocation& location, uint64_t offset,
                    std::span<std::byte> out) const override;

  // Records `meta` for a live object (kInvalidParams if its id is not live or
  // its size does not match the allocation).
  Result<void> Persist(const DurableObjectMeta& meta) override;
  // Every persisted meta of a live object, in id order (not those freed
  // whose delete is still deferred).
  std::vector<DurableObjectMeta> Recover() override;

  const std::string& path() const { return path_; }

 private:
  SsdTier(std::string name, std::string path, uint64_t capacity);

  // Both set *error to a one-line reason on failure.
  Result<void> OpenDb(std::string* error);
  // Rebuilds live_/used_/next_id_ from the meta records and drops orphaned
  // chunks. Called once from Open, before the tier is shared.
  Result<void> LoadAndCleanUp(std::string* error);
  // Writes `batch` for object `id` if the file system has room for it (see
  // kDataWriteReserveBytes; `data` selects the data or the metadata reserve).
  // kNoAvailableHandle when it has not, or when RocksDB reports no space.
  Result<void> WriteChecked(rocksdb::WriteBatch& batch, uint64_t id, bool data);
  // Bytes the file system holding path_ still has for us, or nullopt if
  // statvfs fails (the check is then skipped: RocksDB's status decides).
  std::optional<uint64_t> FreeDiskBytes() const;
  // Asks the reclaim thread for a pass; returns at once.
  void RequestReclaim();
  // The reclaim thread: one ReclaimDiskSpace per request, rate-limited.
  void ReclaimLoop();
  // Flushes both column families (the WALs holding freed objects go, and a
  // flush drops chunks whose range tombstone sits in the same memtable), then
  // compacts the data column family if the disk has room for its tables, so
  // that blob files holding only freed chunks are deleted. A pass after which
  // nothing was freed only flushes: the compaction would free nothing new.
  void ReclaimDiskSpace();
  // Bytes a flush could write at most: the live WAL files' size.
  uint64_t UnflushedBytes() const;
  // Deletes objects whose delete failed earlier (no room for the tombstones);
  // until then only the deferred-deletes file keeps a restart from bringing
  // them back.
  void RetryDeferredDeletes();
  // Remembers `id` as freed but not yet deleted, in memory and, if it can, in
  // the deferred-deletes file.
  void DeferDelete(uint64_t id);
  // Opens the deferred-deletes file and returns the ids recorded in it; a
  // new (or short) file is extended to all its slots with empty ones. A file
  // that exists but cannot be opened or read fails (one line in *error):
  // without its records deleted objects would come back. Without the file
  // (it cannot be created or extended) deferred deletes are kept in memory
  // only, and a warning says so.
  Result<std::vector<uint64_t>> OpenDeferredFile(std::string* error);
  // Records `id` in a free slot of the file and syncs it; false if there is
  // no file, no free slot or the write fails.
  bool RecordDeferred(uint64_t id);
  // Frees the slot of `id` once its delete landed and the WAL holding it is
  // synced, and syncs the slot: a stale slot would only repeat a delete (Open
  // never hands out an id found in the file), but a slot cleared before the
  // delete is durable could let a crash bring the object back.
  void ClearDeferred(uint64_t id);
  Result<void> WriteChunk(const TierLocation& location, uint64_t chunk, uint64_t offset_in_chunk,
                          std::span<const std::byte> data);
  Result<void> ReadChunk(const TierLocation& location, uint64_t chunk, uint64_t offset_in_chunk,
                         std::span<std::byte> out) const;
  // Remembers that a read of live `id` found its bytes damaged or missing.
  void MarkDamaged(uint64_t id) const;
  void ForgetDamage(uint64_t id);
  // Drops all chunks and the meta record of `id` in one atomic batch.
  Result<void> DeleteObject(uint64_t id);
  bool IsLive(uint64_t id) const;
  std::mutex& RmwMutex(uint64_t id, uint64_t chunk);
  std::mutex& ObjectMutex(uint64_t id);

  const std::string name_;
  const std::string path_;
  const uint64_t capacity_;

  // Owned; column family handles are destroyed before the DB is closed.
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* data_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> live_;  // id -> size, guarded by mu_
  uint64_t used_ = 0;                            // guarded by mu_
  uint64_t next_id_ = 1;                         // guarded by mu_
  std::vector<uint64_t> deferred_deletes_;       // guarded by mu_
  // Live ids a read found damaged or missing (Damaged); forgotten on Free.
  mutable std::unordered_set<uint64_t> damaged_;  // guarded by mu_
  std::atomic<bool> has_deferred_deletes_{false};

  // The deferred-deletes file (-1 when it could not be opened) and which id
  // each of its slots holds (0: free). Guarded by deferred_file_mu_, taken
  // last: no other lock is taken while it is held.
  std::mutex deferred_file_mu_;
  int deferred_fd_ = -1;
  std::vector<uint64_t> deferred_slots_;

  // Bytes of batches being written right now: concurrent writers must not
  // both count the same free space.
  std::atomic<uint64_t> in_flight_bytes_{0};
  // Set after RocksDB failed a write: it then refuses writes until Resume().
  std::atomic<bool> needs_resume_{false};
  // Set when a data write was refused for lack of disk, cleared when one
  // fits again: while set, a Free asks for a reclaim pass.
  std::atomic<bool> disk_short_{false};

  // The reclaim thread and its requests. reclaim_mu_ may be taken under the
  // per-object and per-chunk locks (Free, Persist, WriteChunk ask for a pass)
  // but nothing else is ever taken while it is held, so it orders last.
  std::mutex reclaim_mu_;
  std::condition_variable reclaim_cv_;
  bool reclaim_requested_ = false;  // guarded by reclaim_mu_
  bool reclaim_stopping_ = false;   // guarded by reclaim_mu_
  // Objects freed so far, and how many had been when the last compaction
  // started (only the reclaim thread touches that one).
  std::atomic<uint64_t> frees_{0};
  std::optional<uint64_t> frees_at_compaction_;
  std::thread reclaimer_;

  // Striped locks: rmw_mu_ by (id, chunk) for read-modify-write of partial
  // chunks, object_mu_ by id to order Persist against Free. Lock order:
  // object_mu_ before mu_; rmw_mu_ is never held with another.
  std::array<std::mutex, 64> rmw_mu_;
  std::array<std::mutex, 64> object_mu_;
};

}  // namespace mooncake
