#pragma once

// OwnerCache: the client's memory of which node owns a key, bounded by
// bytes. Most reads find their owner here and skip the master round trip;
// a wrong entry costs one extra call (the node denies the key and the
// client asks the master), so the cache may forget or be stale, never lie
// for long.
//
// Eviction is generational: entries go into the young generation; when it
// has used half the budget, the old generation is dropped whole and the
// young one becomes old. A hit in the old generation moves the entry back
// to the young one, so keys in use survive, like an LRU, at O(1) per call
// and with no per-entry list to keep. Sharded by key hash, so concurrent
// readers rarely share a lock.
//
// Thread-safety: every method is safe from any thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mooncake {

class OwnerCache {
 public:
  // Holds entries worth at most `budget_bytes` (EntryBytes each); 0 keeps
  // nothing.
  explicit OwnerCache(uint64_t budget_bytes);
  OwnerCache(const OwnerCache&) = delete;
  OwnerCache& operator=(const OwnerCache&) = delete;

  std::optional<std::string> Find(std::string_view key);
  void Remember(std::string_view key, std::string_view node_id);
  void Forget(std::string_view key);

  // What one entry is charged: its strings plus the map's bookkeeping.
  static uint64_t EntryBytes(std::string_view key, std::string_view node_id);

  uint64_t bytes() const;
  size_t entries() const;

 private:
  static constexpr size_t kShards = 16;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Generation = std::unordered_map<std::string, std::string, StringHash, std::equal_to<>>;

  struct Shard {
    mutable std::mutex mu;
    Generation young;  // guarded by mu
    Generation old;    // guarded by mu
    uint64_t young_bytes = 0;
    uint64_t old_bytes = 0;
  };

  Shard& ShardOf(std::string_view key);
  // Caller holds shard.mu: inserts or updates in the young generation, turning the
  // generations over when it is full.
  void InsertLocked(Shard& shard, std::string key, std::string node_id);
  // Caller holds shard.mu: removes `key` from `generation` and its bytes.
  static void EraseLocked(Generation& generation, uint64_t& bytes, std::string_view key);

  // Each shard's young generation may use this much before it turns over.
  const uint64_t generation_budget_;
  std::array<Shard, kShards> shards_;
};

}  // namespace mooncake
