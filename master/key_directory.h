#pragma once

// KeyDirectory: the master's key -> owner map, built to hold tens of
// millions of keys in little memory and to answer lookups fast.
//
// Owners are small integers (the master interns node ids); the directory
// gives them no meaning. Keys are arbitrary byte strings (any byte value,
// NUL included) of up to 4 GiB in total per shard.
//
// Layout: the key space is split by hash into kShards shards, each with its
// own lock, an open-addressing table of 8-byte slots (blob offset + 32 hash
// bits, linear probing, backward-shift deletion: no tombstones) and one
// growable byte arena holding every key once as [owner u32][length varint]
// [bytes]. A table grows (or shrinks) by rehashing one shard from the stored
// hash bits, never reading keys; an arena is compacted when more than half
// of it is dead. So a key costs its own bytes plus about 20 bytes: no
// std::string, no per-entry node, no per-key malloc.
//
// Thread-safety: every method is safe to call concurrently. Each shard's
// readers-writer lock guards that shard: lookups and iteration take it
// shared, writes exclusive, and a waiting writer keeps new readers out. No
// method holds two shard locks at once. Batched calls
// group their keys by shard and lock each shard they touch once per pass
// over the batch, not once per key; FindMany makes two passes so that its
// cache misses overlap (prefetching slots, then key blobs).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace mooncake {

class KeyDirectory {
 public:
  // "No owner": the key is absent. Never a valid owner.
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kShards = 256;

  KeyDirectory();
  ~KeyDirectory();
  KeyDirectory(const KeyDirectory&) = delete;
  KeyDirectory& operator=(const KeyDirectory&) = delete;

  // The owner of `key`, or kNone.
  uint32_t Find(std::string_view key) const;
  // Find for each key; owners[i] answers keys[i]. owners.size() must equal
  // keys.size().
  void FindMany(std::span<const std::string_view> keys, std::span<uint32_t> owners) const;

  // Sets key -> owner if the key is absent. Returns the owner after the call:
  // `owner` if it claimed the key now or owned it already, another owner if
  // that one holds it, kNone only if the key could not be stored (its shard's
  // arena is at its 4 GiB limit). `owner` must not be kNone.
  uint32_t Claim(std::string_view key, uint32_t owner);
  // Claim for each key, all for the same owner; owners[i] answers keys[i].
  void ClaimMany(std::span<const std::string_view> keys, uint32_t owner,
                 std::span<uint32_t> owners);

  // Sets the owner to `desired` only if it is `expected`. Returns the owner
  // before the call (kNone if absent): the swap happened iff it equals
  // `expected`.
  uint32_t CompareAndSwap(std::string_view key, uint32_t expected, uint32_t desired);

  // Removes the key only if `owner` owns it. Returns the owner before the
  // call (kNone if absent): removed iff it equals `owner`.
  uint32_t RemoveIf(std::string_view key, uint32_t owner);

  // Removes every key whose owner is in `owners`, one shard at a time (other
  // shards stay usable meanwhile). Returns how many keys were removed;
  // `per_owner`, if given, gets one count per entry of `owners`. Keys claimed
  // for these owners while the purge runs may survive: callers stop such
  // claims first.
  size_t RemoveOwners(std::span<const uint32_t> owners, std::vector<size_t>* per_owner = nullptr);

  // Calls fn(key, owner) for every key, shard by shard, holding that shard's
  // lock shared: fn must not call back into the directory. A key present for
  // the whole call is visited exactly once; keys written meanwhile may or may
  // not be. The key view is valid only during the call.
  void ForEach(const std::function<void(std::string_view key, uint32_t owner)>& fn) const;

  size_t size() const;
  // Bytes held by tables and arenas (allocated, not necessarily resident).
  size_t memory_bytes() const;

 private:
  struct Shard;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace mooncake
