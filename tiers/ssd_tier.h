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

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tiers/cache_tier.h"

// Forward declarations keep RocksDB's headers out of everyone who includes
// this one (they are heavy to compile).
namespace rocksdb {
class DB;
class ColumnFamilyHandle;
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

  // Opens (creating if needed) the database at `path`, deletes chunks of
  // objects that were never persisted, and recomputes used() from the
  // persisted metas. `capacity` (> 0) limits the logical bytes allocated.
  static Result<std::unique_ptr<SsdTier>> Open(std::string name, std::string path,
                                               uint64_t capacity);

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
  // Chunk-aligned writes that cover whole chunks are blind puts; partial
  // chunks are read, patched and rewritten.
  Result<void> Write(const TierLocation& location, uint64_t offset,
                     std::span<const std::byte> data) override;
  // Fails with kInternalError if a chunk in the range was never written.
  Result<void> Read(const TierLocation& location, uint64_t offset,
                    std::span<std::byte> out) const override;

  // Records `meta` for a live object (kInvalidParams if its id is not live or
  // its size does not match the allocation).
  Result<void> Persist(const DurableObjectMeta& meta) override;
  // Every persisted meta, in id order.
  std::vector<DurableObjectMeta> Recover() override;

  const std::string& path() const { return path_; }

 private:
  SsdTier(std::string name, std::string path, uint64_t capacity);

  Result<void> OpenDb();
  // Rebuilds live_/used_/next_id_ from the meta records and drops orphaned
  // chunks. Called once from Open, before the tier is shared.
  Result<void> LoadAndCleanUp();
  Result<void> WriteChunk(const TierLocation& location, uint64_t chunk, uint64_t offset_in_chunk,
                          std::span<const std::byte> data);
  Result<void> ReadChunk(const TierLocation& location, uint64_t chunk, uint64_t offset_in_chunk,
                         std::span<std::byte> out) const;
  // Drops all chunks and the meta record of `id` in one atomic batch.
  Result<void> DeleteObject(uint64_t id);
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

  // Striped locks: rmw_mu_ by (id, chunk) for read-modify-write of partial
  // chunks, object_mu_ by id to order Persist against Free. Lock order:
  // object_mu_ before mu_; rmw_mu_ is never held with another.
  std::array<std::mutex, 64> rmw_mu_;
  std::array<std::mutex, 64> object_mu_;
};

}  // namespace mooncake
