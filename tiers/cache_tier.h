#pragma once

// The storage interface every tier (VRAM, DRAM, SSD) implements. A tier only
// stores bytes at locations it hands out; which key lives where, and every
// policy (pins, leases, eviction order), belongs to the worker's
// TieredCacheBackend.
//
// Thread-safety: every method may be called from any thread. Allocate/Free
// are serialised inside the tier. Read/Write on one location must not race
// with Free of that location or with another Write of the same bytes; the
// backend guarantees that, so tiers do not lock on the data path.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace mooncake {

enum class TierKind : int { kVram = 0, kDram = 1, kSsd = 2 };

std::string_view ToString(TierKind kind);

// Where an object lives inside one tier. `offset` is a byte offset into the
// arena for memory tiers and an object id for the SSD tier.
struct TierLocation {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool operator==(const TierLocation&) const = default;
};

// What a tier persists beside an object so a restarted worker can recover it.
// Only tiers that survive a restart (SSD) store it.
struct DurableObjectMeta {
  std::string key;
  TierLocation location;
  uint64_t version = 0;
  bool hard_pinned = false;
  bool soft_pinned = false;
};

// How another process on this node reaches a memory tier's bytes directly,
// without a copy through the worker: producers of plan-based writes and
// device readers map the whole region once and use TierLocation offsets.
struct SharedRegion {
  enum class Kind {
    kHostFile,   // open(path) + mmap(MAP_SHARED): same node, same user
    kDeviceIpc,  // hipIpcOpenMemHandle(ipc_handle) on device_index
  };
  Kind kind = Kind::kHostFile;
  std::string path;
  std::string ipc_handle;  // the bytes of a hipIpcMemHandle_t
  int device_index = -1;
  uint64_t size = 0;       // bytes of the whole region
  std::string machine_id;  // MachineId() of the exporting process
};

// Bytes a tier read into memory of its own and lent to the caller
// (CacheTier::ReadLent); destroying this gives the memory back.
class LentBytes {
 public:
  virtual ~LentBytes() = default;
  virtual std::span<const std::byte> bytes() const = 0;
};

class CacheTier {
 public:
  virtual ~CacheTier() = default;

  virtual std::string_view name() const = 0;
  virtual TierKind kind() const = 0;
  virtual uint64_t capacity() const = 0;
  // Bytes currently allocated (including allocator rounding).
  virtual uint64_t used() const = 0;
  virtual uint64_t object_count() const = 0;

  // Reserves `size` bytes (size > 0). kNoAvailableHandle when it cannot.
  virtual Result<TierLocation> Allocate(uint64_t size) = 0;
  // Releases a location obtained from Allocate (and its durable meta, if any).
  virtual void Free(const TierLocation& location) = 0;

  // Copies `data` to [offset, offset + data.size()) of the location.
  virtual Result<void> Write(const TierLocation& location, uint64_t offset,
                             std::span<const std::byte> data) = 0;
  // Copies [offset, offset + out.size()) of the location into `out`.
  virtual Result<void> Read(const TierLocation& location, uint64_t offset,
                            std::span<std::byte> out) const = 0;
  // Whether a read of the location found its bytes damaged or missing (a
  // checksum mismatch, a lost record), not a passing I/O error: they will
  // never read back, so the object is lost and its space only holds room.
  virtual bool Damaged(const TierLocation& location) const { return false; }

  // Where the location's bytes lie in this process's memory, for tiers of
  // host memory (DRAM); null for the others. Valid until the location is
  // freed.
  virtual const std::byte* HostAddress(const TierLocation& location) const { return nullptr; }
  // The same bytes, writable: for the backend's copies into a location it
  // holds for writing, as it would call Write (see the rule above).
  virtual std::byte* WritableHostAddress(const TierLocation& location) { return nullptr; }

  // For tiers outside host memory that can read into buffers of their own
  // faster than into the caller's (the VRAM tier's pinned read buffers: one
  // DMA, no staging copy): reads [offset, offset + size) of the location
  // into such a buffer and lends it until the returned LentBytes is
  // destroyed. kNoAvailableHandle when none is free or the size does not fit
  // one: use Read. Other errors as Read's.
  virtual Result<std::unique_ptr<LentBytes>> ReadLent(const TierLocation& location, uint64_t offset,
                                                      uint64_t size) const {
    return Err(ErrorCode::kNoAvailableHandle);
  }

  // The region other local processes may map, for tiers that can share
  // their memory; kTierNotFound for those that cannot (SSD).
  virtual Result<SharedRegion> ExportRegion() const { return Err(ErrorCode::kTierNotFound); }

  // Durable tiers record `meta` so that Recover() returns it after a restart;
  // volatile tiers accept and ignore it.
  virtual Result<void> Persist(const DurableObjectMeta& meta) { return {}; }
  // Objects persisted before the last shutdown; empty for volatile tiers.
  virtual std::vector<DurableObjectMeta> Recover() { return {}; }
};

}  // namespace mooncake
