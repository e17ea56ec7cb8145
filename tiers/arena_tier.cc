#include "tiers/arena_tier.h"

#include <new>
#include <utility>

#include "common/log.h"

namespace mooncake {

ArenaTier::ArenaTier(std::string name, uint64_t arena_size, uint64_t alignment)
    : name_(std::move(name)), arena_size_(arena_size), allocator_(arena_size, alignment) {}

Result<TierLocation> ArenaTier::Allocate(uint64_t size) {
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  try {
    auto offset = allocator_.Allocate(size);
    if (!offset) return Err(ErrorCode::kNoAvailableHandle);
    return TierLocation{.offset = *offset, .size = size};
  } catch (const std::bad_alloc&) {
    // The allocator's bookkeeping maps could not grow.
    MC_LOG_ERROR("tier allocate bookkeeping out of memory tier={} size={}", name_, size);
    return Err(ErrorCode::kInternalError);
  }
}

void ArenaTier::Free(const TierLocation& location) {
  try {
    allocator_.Free(location.offset);
  } catch (const std::bad_alloc&) {
    // Coalescing needs one map node; if even that fails the block is leaked
    // rather than the process aborted.
    MC_LOG_ERROR("tier free bookkeeping out of memory tier={} offset={}", name_, location.offset);
  }
}

bool ArenaTier::InBounds(const TierLocation& location, uint64_t offset, uint64_t len) const {
  if (location.offset > arena_size_ || location.size > arena_size_ - location.offset) return false;
  return offset <= location.size && len <= location.size - offset;
}

}  // namespace mooncake
