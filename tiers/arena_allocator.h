#pragma once

// A best-fit allocator over a contiguous range [0, capacity) of some arena
// (host memory, device memory). It hands out offsets only; the caller owns
// the memory. Free blocks are coalesced with their neighbours on release, so
// fragmentation stays bounded by the live set, not by history.
//
// Thread-safety: all methods are safe to call concurrently (one mutex).

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace mooncake {

class ArenaAllocator {
 public:
  // `alignment` must be a power of two; every offset and size is rounded to it.
  explicit ArenaAllocator(uint64_t capacity, uint64_t alignment = 64);

  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;

  // Returns the offset of a block of at least `size` bytes, or nullopt.
  std::optional<uint64_t> Allocate(uint64_t size);
  // Releases the block at `offset`; unknown offsets are ignored.
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  uint64_t allocation_count() const;
  // Largest single block that Allocate could return right now.
  uint64_t largest_free_block() const;

 private:
  void InsertFree(uint64_t offset, uint64_t size);  // requires mu_
  void EraseFree(uint64_t offset, uint64_t size);   // requires mu_
  // The free block at `offset` becomes [new_offset, +new_size); requires mu_.
  void MoveFree(uint64_t offset, uint64_t size, uint64_t new_offset, uint64_t new_size);

  const uint64_t capacity_;
  const uint64_t alignment_;

  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_by_offset_;           // guarded by mu_
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset), guarded by mu_
  std::unordered_map<uint64_t, uint64_t> allocated_;      // offset -> size, guarded by mu_
  uint64_t used_ = 0;                                     // guarded by mu_
};

}  // namespace mooncake
