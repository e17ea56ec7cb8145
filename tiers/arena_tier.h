#pragma once

// ArenaTier: what every memory tier (DRAM, VRAM) shares. One arena of a fixed
// size, carved into objects by an ArenaAllocator, so an object costs no
// malloc (or hipMalloc) and the whole arena can be shared or registered once.
// Subclasses own the memory itself and move the bytes (Write/Read).
//
// Thread-safety: Allocate/Free/accounting are serialised by the allocator's
// mutex; the rest is immutable after construction.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tiers/arena_allocator.h"
#include "tiers/cache_tier.h"

namespace mooncake {

class ArenaTier : public CacheTier {
 public:
  std::string_view name() const override { return name_; }
  uint64_t capacity() const override { return arena_size_; }
  uint64_t used() const override { return allocator_.used(); }
  uint64_t object_count() const override { return allocator_.allocation_count(); }

  // kInvalidParams for size 0, kNoAvailableHandle when no free block fits,
  // kInternalError when the allocator's bookkeeping cannot grow.
  Result<TierLocation> Allocate(uint64_t size) override;
  void Free(const TierLocation& location) override;

  uint64_t arena_size() const { return arena_size_; }

 protected:
  // `alignment` (a power of two) rounds every allocation.
  ArenaTier(std::string name, uint64_t arena_size, uint64_t alignment);

  // True when [offset, offset + len) lies inside the location and the
  // location inside the arena; written to be overflow-safe.
  bool InBounds(const TierLocation& location, uint64_t offset, uint64_t len) const;

  const std::string name_;
  const uint64_t arena_size_;

 private:
  ArenaAllocator allocator_;
};

}  // namespace mooncake
