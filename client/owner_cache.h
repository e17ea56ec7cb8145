#pragma once

// OwnerCache: the client's memory of which node owns a key, bounded by
// bytes. Most reads find their owner here and skip the master round trip;
// a wrong entry costs one extra call (the node denies the key and the
// client asks the master), so the cache may forget or be stale, never lie
// for long.
//
// An entry is 16 bytes whatever the key: the key's 64-bit hash, a small
// number for the node (node ids are interned once) and a recency stamp. The
// key itself is not kept; two keys with one hash (about one pair in 10^12
// for a million keys) would share an entry, which at worst sends a read to
// the wrong node, the same as a stale entry. Entries live in buckets of
// eight, one 128-byte run of memory, so a lookup costs one or two cache
// misses where a node-based map of strings cost four or more (a put
// remembers every key it writes, so this is on the put path too).
//
// Each shard's table starts small and doubles when it is three quarters
// full or a key's bucket is, up to its share of the budget; past that, an
// insert into a full bucket replaces the bucket's least recently used entry. Sharded by key
// hash, so concurrent callers rarely share a lock.
//
// At most kMaxNodes distinct node ids are interned in a cache's life; the
// owners of keys on further nodes are not remembered (reads of them ask the
// master).
//
// Thread-safety: every method is safe from any thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/huge_page_memory.h"
#include "common/string_hash.h"

namespace mooncake {

class OwnerCache {
 public:
  // What one entry costs, whatever its key and node id.
  static constexpr uint64_t kEntryBytes = 16;
  static constexpr uint32_t kMaxNodes = 4096;

  // Holds at most `budget_bytes` of entries (kEntryBytes each); a budget
  // under one bucket per shard keeps nothing.
  explicit OwnerCache(uint64_t budget_bytes);
  OwnerCache(const OwnerCache&) = delete;
  OwnerCache& operator=(const OwnerCache&) = delete;

  std::optional<std::string> Find(std::string_view key);
  void Remember(std::string_view key, std::string_view node_id);
  void Forget(std::string_view key);

  // Memory the tables hold now (never more than the budget).
  uint64_t bytes() const;
  size_t entries() const;

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kWays = 8;  // entries per bucket

  struct Slot {
    uint64_t hash = 0;
    uint32_t node = 0;  // 0: empty; else an index into names_ plus one
    uint32_t stamp = 0;
  };
  static_assert(sizeof(Slot) == kEntryBytes);

  struct Shard {
    mutable std::mutex mu;
    // Guarded by mu; kWays per bucket. In huge pages once 2 MiB: a lookup
    // is a random probe into millions of entries.
    std::vector<Slot, HugePageAllocator<Slot>> slots;
    size_t used = 0;     // guarded by mu
    uint32_t clock = 0;  // guarded by mu; stamps recency
  };

  Shard& ShardOf(uint64_t hash) { return shards_[hash % kShards]; }
  // Caller holds shard.mu: the bucket `hash` belongs in (slots not empty).
  static Slot* BucketOf(Shard& shard, uint64_t hash);
  static Slot* Match(Slot* bucket, uint64_t hash);
  // Caller holds shard.mu: puts an entry into its bucket, in a free slot or
  // over the least recently used one.
  static void Place(Shard& shard, const Slot& entry);
  static bool HasRoom(const Slot* bucket);
  // Caller holds shard.mu: doubles the table (not past max_slots_) and
  // moves every entry to its new bucket.
  void Grow(Shard& shard);
  // The number for `node_id` (one plus its index), 0 once kMaxNodes are
  // taken.
  uint32_t Intern(std::string_view node_id);

  const size_t max_slots_;  // per shard: a power of two, a multiple of kWays
  std::array<Shard, kShards> shards_;

  mutable std::shared_mutex names_mu_;
  // Interned node ids, reserved for kMaxNodes so that an entry is never
  // moved: a reader holding a number reads names_[number - 1] unlocked.
  std::vector<std::string> names_;  // names_mu_
  std::unordered_map<std::string, uint32_t, TransparentStringHash, std::equal_to<>>
      ids_;  // names_mu_
};

}  // namespace mooncake
