#pragma once

// A host-memory tier: one mmap'd arena carved up by an ArenaAllocator, so
// objects cost no malloc and the whole arena can be registered for RDMA once
// (arena_base()/arena_size()). The arena is a memfd, so producers on this
// node can map it and write objects in place (ExportRegion, plan-based
// writes); where memfd is unavailable it is anonymous memory, not shared.
//
// Thread-safety: Allocate/Free/accounting are serialised by the allocator's
// mutex. Read/Write take no lock: they copy into disjoint ranges of the arena,
// and the backend guarantees no Write/Free races on one location (see
// cache_tier.h).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tiers/arena_tier.h"

namespace mooncake {

// How DramTier::Create backs the arena; the defaults map it lazily.
struct DramTierOptions {
  // Fault in every page of the arena before Create returns, so the first
  // write into each page pays no page fault (a large share of a cold put's
  // cost) at the cost of startup time and RSS = capacity up front.
  // Create fails rather than leave the worker to be OOM-killed later when
  // the memory is not there.
  bool prefault = false;
};

class DramTier : public ArenaTier {
 public:
  // Every allocation is rounded to this many bytes (a cache line).
  static constexpr uint64_t kAlignment = 64;

  // Maps an arena of `capacity` bytes (> 0). Pages are reserved lazily
  // (MAP_NORESERVE, a sparse memfd), so a large capacity costs nothing
  // until written, unless `options.prefault` populates them all up front:
  // then kNoAvailableHandle when the memory cannot be had.
  static Result<std::unique_ptr<DramTier>> Create(std::string name, uint64_t capacity,
                                                  DramTierOptions options = {});

  ~DramTier() override;
  DramTier(const DramTier&) = delete;
  DramTier& operator=(const DramTier&) = delete;

  TierKind kind() const override { return TierKind::kDram; }
  Result<void> Write(const TierLocation& location, uint64_t offset,
                     std::span<const std::byte> data) override;
  Result<void> Read(const TierLocation& location, uint64_t offset,
                    std::span<std::byte> out) const override;
  const std::byte* HostAddress(const TierLocation& location) const override {
    return arena_base_ + location.offset;
  }
  std::byte* WritableHostAddress(const TierLocation& location) override {
    return arena_base_ + location.offset;
  }
  // The memfd as /proc/<pid>/fd/<n>; kTierNotFound when not shareable.
  Result<SharedRegion> ExportRegion() const override;

  // The arena, owned by this tier for its whole lifetime; the transport
  // registers it for RDMA. Valid until the tier is destroyed.
  std::byte* arena_base() const { return arena_base_; }

 private:
  DramTier(std::string name, std::byte* base, uint64_t size, int fd);

  std::byte* const arena_base_;
  const int arena_fd_;  // the memfd behind the arena, or -1
};

}  // namespace mooncake
