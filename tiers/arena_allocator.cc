#include "tiers/arena_allocator.h"

#include <bit>
#include <iterator>

namespace mooncake {

namespace {

// A non-power-of-two alignment would break the mask arithmetic below; the
// constructor cannot fail, so it rounds such a value up instead.
uint64_t SanitizeAlignment(uint64_t alignment) {
  if (alignment == 0) return 1;
  return std::bit_ceil(alignment);
}

}  // namespace

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity), alignment_(SanitizeAlignment(alignment)) {
  // A tail shorter than one alignment unit could never start a block.
  const uint64_t usable = capacity_ & ~(alignment_ - 1);
  if (usable > 0) InsertFree(0, usable);
}

std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t size) {
  if (size == 0 || size > capacity_) return std::nullopt;
  const uint64_t rounded = (size + alignment_ - 1) & ~(alignment_ - 1);
  std::lock_guard lock(mu_);
  // Best fit: the smallest free block that is large enough (lowest offset
  // among equals), which keeps large blocks intact for large requests.
  auto it = free_by_size_.lower_bound({rounded, 0});
  if (it == free_by_size_.end()) return std::nullopt;
  const auto [block_size, block_offset] = *it;
  if (block_size > rounded) {
    MoveFree(block_offset, block_size, block_offset + rounded, block_size - rounded);
  } else {
    EraseFree(block_offset, block_size);
  }
  allocated_.emplace(block_offset, rounded);
  used_ += rounded;
  return block_offset;
}

void ArenaAllocator::Free(uint64_t offset) {
  std::lock_guard lock(mu_);
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) return;
  uint64_t start = offset;
  uint64_t size = it->second;
  allocated_.erase(it);
  used_ -= size;

  // The free blocks right after and right before this one, if any.
  std::optional<std::pair<uint64_t, uint64_t>> next;
  std::optional<std::pair<uint64_t, uint64_t>> prev;
  if (auto found = free_by_offset_.find(start + size); found != free_by_offset_.end()) {
    next = *found;
  }
  if (auto after = free_by_offset_.lower_bound(start); after != free_by_offset_.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second == start) prev = *before;
  }
  // Merged with its neighbours, the block takes over one neighbour's
  // entries (no allocation) and the other's are dropped.
  const uint64_t merged_start = prev ? prev->first : start;
  const uint64_t merged_size = size + (prev ? prev->second : 0) + (next ? next->second : 0);
  if (prev && next) EraseFree(next->first, next->second);
  if (prev) {
    MoveFree(prev->first, prev->second, merged_start, merged_size);
  } else if (next) {
    MoveFree(next->first, next->second, merged_start, merged_size);
  } else {
    InsertFree(merged_start, merged_size);
  }
}

uint64_t ArenaAllocator::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

uint64_t ArenaAllocator::allocation_count() const {
  std::lock_guard lock(mu_);
  return allocated_.size();
}

uint64_t ArenaAllocator::largest_free_block() const {
  std::lock_guard lock(mu_);
  if (free_by_size_.empty()) return 0;
  return free_by_size_.rbegin()->first;
}

void ArenaAllocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void ArenaAllocator::MoveFree(uint64_t offset, uint64_t size, uint64_t new_offset,
                              uint64_t new_size) {
  // Node handles keep the two entries' memory: an allocation that splits a
  // block, or a free that grows one, costs the heap nothing.
  auto by_offset = free_by_offset_.extract(offset);
  auto by_size = free_by_size_.extract({size, offset});
  by_offset.key() = new_offset;
  by_offset.mapped() = new_size;
  by_size.value() = {new_size, new_offset};
  free_by_offset_.insert(std::move(by_offset));
  free_by_size_.insert(std::move(by_size));
}

void ArenaAllocator::EraseFree(uint64_t offset, uint64_t size) {
  free_by_offset_.erase(offset);
  free_by_size_.erase({size, offset});
}

}  // namespace mooncake
