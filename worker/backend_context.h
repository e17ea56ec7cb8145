#pragma once

// BackendContext: what every part of the TieredCacheBackend shares (the
// tiers, options, the ownership directory and peers, the counters) and the
// one mutex that guards the parts' own state.
//
// Thread-safety: the fields are fixed after construction (`peers` is set
// once before serving) and the counters are atomic, so all of them may be
// read without the lock. `mu` is the backend's single lock: every part's
// "Locked" method and every "guarded by mu" member means this mutex.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/string_hash.h"
#include "tiers/cache_tier.h"
#include "worker/backend_types.h"

namespace mooncake {

struct TierCounters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> promotions_in{0};
  std::atomic<uint64_t> demotions_out{0};
  std::atomic<uint64_t> evictions{0};
  // Bytes read from / written to the tier's storage: reads served to
  // clients, copies between tiers and writes through the worker (not bytes a
  // client writes or reads directly in a shared or RDMA-registered region).
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> written_bytes{0};
};

// The counters BackendStats reports; each part bumps its own.
struct BackendCounters {
  explicit BackendCounters(size_t tiers) : tier(new TierCounters[tiers]) {}
  std::unique_ptr<TierCounters[]> tier;
  std::atomic<uint64_t> gets{0}, get_misses{0}, puts{0}, removes{0}, dropped{0};
  std::atomic<uint64_t> upserts{0}, prefetch_started{0}, prefetch_succeeded{0};
  std::atomic<uint64_t> prefetch_failed{0}, prefetch_skipped{0}, moved_out{0}, moved_in{0};
  // Bytes copied between tiers or handed to other nodes (for the move log).
  std::atomic<uint64_t> moved_bytes{0};
};

struct BackendContext {
  // `tiers` are ordered fastest first and owned here; `directory` must
  // outlive the context.
  BackendContext(std::vector<std::unique_ptr<CacheTier>> tiers_in, OwnerDirectory* directory_in,
                 BackendOptions options_in)
      : tiers(std::move(tiers_in)),
        directory(directory_in),
        options(options_in),
        counters(tiers.size()) {
    for (const auto& tier : tiers) {
      auto region = tier->ExportRegion();
      shared_regions.push_back(region ? std::optional(*region) : std::nullopt);
    }
  }

  size_t last_tier() const { return tiers.size() - 1; }
  // Index of the tier with this name, or -1.
  int TierIndex(std::string_view name) const {
    for (size_t t = 0; t < tiers.size(); ++t) {
      if (tiers[t]->name() == name) return static_cast<int>(t);
    }
    return -1;
  }

  // The counters of the tier `tier` points at (one of `tiers`).
  TierCounters& CountersOf(const CacheTier* tier) {
    for (size_t t = 0; t < tiers.size(); ++t) {
      if (tiers[t].get() == tier) return counters.tier[t];
    }
    return counters.tier[last_tier()];  // unreachable: every allocation is in a tier
  }
  void CountRead(const CacheTier* tier, uint64_t bytes) {
    CountersOf(tier).read_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  void CountWritten(const CacheTier* tier, uint64_t bytes) {
    CountersOf(tier).written_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }

  const std::vector<std::unique_ptr<CacheTier>> tiers;
  OwnerDirectory* const directory;
  const BackendOptions options;
  // Per tier: the region local processes may map, if it can share.
  std::vector<std::optional<SharedRegion>> shared_regions;
  PeerTransfer* peers = nullptr;  // set once before serving; may stay null
  BackendCounters counters;
  mutable std::mutex mu;

  // Keys whose record is complete and published while the commit's claim of
  // it is still out (a write that NeedsClaim() although the key was owned
  // here: a registration missed it, or an earlier claim's answer was lost).
  // Nothing that would release the key (a remove, a drop) or take it over
  // (an upsert) may start meanwhile: a release could reach the master
  // before the claim, which would then name this node for a key it erased.
  // Kept by WritePath; read by every path that releases.
  bool ClaimingLocked(std::string_view key) const {
    return !claiming.empty() && claiming.contains(key);
  }
  std::unordered_map<std::string, uint32_t, TransparentStringHash, std::equal_to<>>
      claiming;  // guarded by mu
};

}  // namespace mooncake
