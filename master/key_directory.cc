#include "master/key_directory.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "master/writer_first_mutex.h"

namespace mooncake {
namespace {

static_assert(KeyDirectory::kShards == 256, "ShardOf takes the top 8 hash bits");

// A slot of a shard's table. ref is the blob's arena offset + 1, so that an
// all-zero slot (what calloc hands out) is empty.
struct Slot {
  uint32_t ref;
  uint32_t hash;  // low 32 bits of the key's hash: filters probes, drives rehash
};
static_assert(sizeof(Slot) == 8);

constexpr size_t kMinSlots = 16;
constexpr size_t kMinArena = 4096;
// Offsets travel as ref = offset + 1 in 32 bits.
constexpr size_t kMaxArena = UINT32_MAX;
constexpr size_t kOwnerBytes = sizeof(uint32_t);

uint64_t HashOf(std::string_view key) { return std::hash<std::string_view>{}(key); }
size_t ShardOf(uint64_t hash) { return static_cast<size_t>(hash >> 56); }
uint32_t SlotHash(uint64_t hash) { return static_cast<uint32_t>(hash); }

size_t VarintLen(size_t n) {
  size_t len = 1;
  while (n >= 0x80) {
    n >>= 7;
    ++len;
  }
  return len;
}

char* PutVarint(char* p, size_t n) {
  while (n >= 0x80) {
    *p++ = static_cast<char>((n & 0x7f) | 0x80);
    n >>= 7;
  }
  *p++ = static_cast<char>(n);
  return p;
}

// A blob is [owner u32][key length varint][key bytes], unaligned.
struct Blob {
  std::string_view key;
  size_t size;  // whole blob, header included
};

Blob ReadBlob(const char* p) {
  const auto* q = reinterpret_cast<const unsigned char*>(p + kOwnerBytes);
  size_t len = 0;
  for (int shift = 0;; shift += 7) {
    unsigned char b = *q++;
    len |= static_cast<size_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  const char* key = reinterpret_cast<const char*>(q);
  return Blob{std::string_view(key, len), static_cast<size_t>(key + len - p)};
}

uint32_t ReadOwner(const char* p) {
  uint32_t owner;
  std::memcpy(&owner, p, kOwnerBytes);
  return owner;
}

void WriteOwner(char* p, uint32_t owner) { std::memcpy(p, &owner, kOwnerBytes); }

// Where a probe stopped: at the key's slot, or at the empty slot that ends
// its probe sequence (where it would go).
struct Probe {
  size_t pos;
  bool found;
};

}  // namespace

// One shard: a linear-probing table over an append-only arena. Every member
// is guarded by mu (shared to read, exclusive to write); count is atomic only
// so that size() can sum without locking. mu prefers writers: a purge
// (RemoveOwners) or a claim must not wait out a stream of overlapping
// lookups (writer_first_mutex.h).
struct alignas(64) KeyDirectory::Shard {
  mutable WriterFirstSharedMutex mu;
  Slot* slots = nullptr;  // mask + 1 slots (a power of two), or null when empty
  size_t mask = 0;
  std::atomic<size_t> count{0};
  char* arena = nullptr;
  size_t used = 0;  // bytes appended, live or dead
  size_t cap = 0;   // bytes allocated
  size_t dead = 0;  // bytes of erased blobs
  // Copies of slots and mask readable without mu, only to prefetch: a stale
  // pair yields a useless prefetch, never a wrong answer (a prefetch of any
  // address is harmless).
  std::atomic<const Slot*> hint_slots{nullptr};
  std::atomic<size_t> hint_mask{0};

  ~Shard() { Release(); }

  void Publish() {
    hint_slots.store(slots, std::memory_order_relaxed);
    hint_mask.store(mask, std::memory_order_relaxed);
  }

  void Release() {
    std::free(slots);
    std::free(arena);
    slots = nullptr;
    arena = nullptr;
    mask = used = cap = dead = 0;
    Publish();
  }

  size_t capacity() const { return slots ? mask + 1 : 0; }
  char* BlobAt(uint32_t ref) const { return arena + (ref - 1); }

  Probe Find(std::string_view key, uint32_t hash) const {
    if (!slots) return {0, false};
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.ref == 0) return {i, false};
      if (s.hash == hash && ReadBlob(BlobAt(s.ref)).key == key) return {i, true};
    }
  }

  uint32_t OwnerAt(size_t pos) const { return ReadOwner(BlobAt(slots[pos].ref)); }
  void SetOwnerAt(size_t pos, uint32_t owner) { WriteOwner(BlobAt(slots[pos].ref), owner); }

  // Places a slot in a table with room; the key is known to be absent.
  static void Place(Slot* table, size_t mask, Slot slot) {
    size_t i = slot.hash & mask;
    while (table[i].ref != 0) i = (i + 1) & mask;
    table[i] = slot;
  }

  // Rehashes into `n` slots (a power of two above count) from the stored
  // hash bits alone: no key is read.
  bool Resize(size_t n) {
    auto* table = static_cast<Slot*>(std::calloc(n, sizeof(Slot)));
    if (!table) return false;
    for (size_t i = 0; i < capacity(); ++i) {
      if (slots[i].ref != 0) Place(table, n - 1, slots[i]);
    }
    std::free(slots);
    slots = table;
    mask = n - 1;
    Publish();
    return true;
  }

  // Copies the live blobs into a fresh arena sized for them plus a quarter,
  // rewriting their refs; drops the dead bytes.
  bool Compact() {
    size_t live = used - dead;
    size_t n = std::max(kMinArena, std::min(kMaxArena, live + live / 4));
    auto* fresh = static_cast<char*>(std::malloc(n));
    if (!fresh) return false;
    size_t at = 0;
    for (size_t i = 0; i < capacity(); ++i) {
      Slot& s = slots[i];
      if (s.ref == 0) continue;
      const char* blob = BlobAt(s.ref);
      size_t size = ReadBlob(blob).size;
      std::memcpy(fresh + at, blob, size);
      s.ref = static_cast<uint32_t>(at + 1);
      at += size;
    }
    std::free(arena);
    arena = fresh;
    used = at;
    cap = n;
    dead = 0;
    return true;
  }

  // Makes room for `need` more arena bytes: compaction when half the arena is
  // dead, else growth by doubling (realloc: untouched pages stay unbacked).
  bool Reserve(size_t need) {
    if (used + need <= cap) return true;
    if (dead > 0 && dead >= used / 2 && Compact() && used + need <= cap) return true;
    if (used + need > kMaxArena) return false;
    size_t n = std::min(kMaxArena, std::max({cap * 2, used + need, kMinArena}));
    auto* grown = static_cast<char*>(std::realloc(arena, n));
    if (!grown) return false;
    arena = grown;
    cap = n;
    return true;
  }

  // Inserts an absent key. False only when memory or the arena limit runs out.
  bool Insert(std::string_view key, uint32_t hash, uint32_t owner) {
    size_t n = count.load(std::memory_order_relaxed) + 1;
    if (n > capacity() / 4 * 3 && !Resize(std::max(kMinSlots, capacity() * 2))) return false;
    size_t need = kOwnerBytes + VarintLen(key.size()) + key.size();
    if (!Reserve(need)) return false;
    char* blob = arena + used;
    WriteOwner(blob, owner);
    char* p = PutVarint(blob + kOwnerBytes, key.size());
    std::memcpy(p, key.data(), key.size());
    Place(slots, mask, Slot{static_cast<uint32_t>(used + 1), hash});
    used += need;
    count.store(n, std::memory_order_relaxed);
    return true;
  }

  // Backward-shift deletion: pulls each later member of the probe run into
  // the hole if its home slot allows, so no tombstone is needed. Moves only
  // slots at or after `pos` (cyclically), which is what lets RemoveOwners
  // erase while it scans. Does not resize or compact: call Tidy() after.
  void EraseAt(size_t pos) {
    dead += ReadBlob(BlobAt(slots[pos].ref)).size;
    size_t hole = pos;
    for (size_t j = (pos + 1) & mask; slots[j].ref != 0; j = (j + 1) & mask) {
      size_t home = slots[j].hash & mask;
      // Movable iff the hole lies on the path from its home to j.
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        slots[hole] = slots[j];
        hole = j;
      }
    }
    slots[hole] = Slot{0, 0};
    count.store(count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }

  // After erasing: frees an empty shard, halves a table under 1/8 full,
  // compacts an arena that is more than half dead. Failures to allocate
  // leave things as they were (still correct, only larger).
  void Tidy() {
    size_t n = count.load(std::memory_order_relaxed);
    if (n == 0) {
      Release();
      return;
    }
    size_t slots_wanted = capacity();
    while (slots_wanted > kMinSlots && n < slots_wanted / 8) slots_wanted /= 2;
    if (slots_wanted != capacity()) (void)Resize(slots_wanted);
    if (dead >= kMinArena && dead > used / 2) (void)Compact();
  }

  uint32_t Claim(std::string_view key, uint32_t hash, uint32_t owner) {
    Probe p = Find(key, hash);
    if (p.found) return OwnerAt(p.pos);
    return Insert(key, hash, owner) ? owner : kNone;
  }

  // Prefetches the blob of the first slot whose hash bits match: what
  // Lookup will read next, fetched while other keys are being probed.
  void PrefetchBlob(uint32_t hash) const {
    if (!slots) return;
    for (size_t i = hash & mask; slots[i].ref != 0; i = (i + 1) & mask) {
      if (slots[i].hash == hash) {
        __builtin_prefetch(BlobAt(slots[i].ref));
        return;
      }
    }
  }

  void PrefetchHome(uint32_t hash) const {
    const Slot* table = hint_slots.load(std::memory_order_relaxed);
    if (table) __builtin_prefetch(table + (hash & hint_mask.load(std::memory_order_relaxed)));
  }

  uint32_t Lookup(std::string_view key, uint32_t hash) const {
    Probe p = Find(key, hash);
    return p.found ? OwnerAt(p.pos) : kNone;
  }
};

namespace {

// A batch of keys hashed and ordered by shard (a counting sort), so that
// callers lock each shard once per pass over the batch rather than once per
// key.
class ShardedBatch {
 public:
  explicit ShardedBatch(std::span<const std::string_view> keys)
      : hashes_(keys.size()), order_(keys.size()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      hashes_[i] = HashOf(keys[i]);
      ++start_[ShardOf(hashes_[i]) + 1];
    }
    for (size_t s = 0; s < KeyDirectory::kShards; ++s) start_[s + 1] += start_[s];
    auto fill = start_;
    for (size_t i = 0; i < keys.size(); ++i) {
      order_[fill[ShardOf(hashes_[i])]++] = static_cast<uint32_t>(i);
    }
  }

  uint32_t slot_hash(uint32_t i) const { return SlotHash(hashes_[i]); }

  // Calls fn(shard, indexes of the keys in that shard) for each shard touched.
  template <typename Fn>
  void ForEachShard(Fn&& fn) const {
    for (size_t s = 0; s < KeyDirectory::kShards; ++s) {
      if (start_[s] == start_[s + 1]) continue;
      fn(s, std::span<const uint32_t>(order_.data() + start_[s], start_[s + 1] - start_[s]));
    }
  }

 private:
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> order_;
  std::array<uint32_t, KeyDirectory::kShards + 1> start_{};
};

}  // namespace

KeyDirectory::KeyDirectory() : shards_(new Shard[kShards]) {}

KeyDirectory::~KeyDirectory() = default;

uint32_t KeyDirectory::Find(std::string_view key) const {
  uint64_t hash = HashOf(key);
  const Shard& shard = shards_[ShardOf(hash)];
  std::shared_lock lock(shard.mu);
  return shard.Lookup(key, SlotHash(hash));
}

void KeyDirectory::FindMany(std::span<const std::string_view> keys,
                            std::span<uint32_t> owners) const {
  // Three passes so that the two cache misses of each lookup (its slot, then
  // its blob) overlap across the batch instead of being paid one after the
  // other: prefetch every home slot, then every matching blob, then look up.
  ShardedBatch batch(keys);
  batch.ForEachShard([&](size_t s, std::span<const uint32_t> in_shard) {
    for (uint32_t i : in_shard) shards_[s].PrefetchHome(batch.slot_hash(i));
  });
  batch.ForEachShard([&](size_t s, std::span<const uint32_t> in_shard) {
    const Shard& shard = shards_[s];
    std::shared_lock lock(shard.mu);
    for (uint32_t i : in_shard) shard.PrefetchBlob(batch.slot_hash(i));
  });
  batch.ForEachShard([&](size_t s, std::span<const uint32_t> in_shard) {
    const Shard& shard = shards_[s];
    std::shared_lock lock(shard.mu);
    for (uint32_t i : in_shard) owners[i] = shard.Lookup(keys[i], batch.slot_hash(i));
  });
}

uint32_t KeyDirectory::Claim(std::string_view key, uint32_t owner) {
  uint64_t hash = HashOf(key);
  Shard& shard = shards_[ShardOf(hash)];
  std::unique_lock lock(shard.mu);
  return shard.Claim(key, SlotHash(hash), owner);
}

void KeyDirectory::ClaimMany(std::span<const std::string_view> keys, uint32_t owner,
                             std::span<uint32_t> owners) {
  ShardedBatch batch(keys);
  batch.ForEachShard([&](size_t s, std::span<const uint32_t> in_shard) {
    for (uint32_t i : in_shard) shards_[s].PrefetchHome(batch.slot_hash(i));
  });
  batch.ForEachShard([&](size_t s, std::span<const uint32_t> in_shard) {
    Shard& shard = shards_[s];
    std::unique_lock lock(shard.mu);
    for (uint32_t i : in_shard) owners[i] = shard.Claim(keys[i], batch.slot_hash(i), owner);
  });
}

uint32_t KeyDirectory::CompareAndSwap(std::string_view key, uint32_t expected, uint32_t desired) {
  uint64_t hash = HashOf(key);
  Shard& shard = shards_[ShardOf(hash)];
  std::unique_lock lock(shard.mu);
  Probe p = shard.Find(key, SlotHash(hash));
  if (!p.found) return kNone;
  uint32_t current = shard.OwnerAt(p.pos);
  if (current == expected) shard.SetOwnerAt(p.pos, desired);
  return current;
}

uint32_t KeyDirectory::RemoveIf(std::string_view key, uint32_t owner) {
  uint64_t hash = HashOf(key);
  Shard& shard = shards_[ShardOf(hash)];
  std::unique_lock lock(shard.mu);
  Probe p = shard.Find(key, SlotHash(hash));
  if (!p.found) return kNone;
  uint32_t current = shard.OwnerAt(p.pos);
  if (current == owner) {
    shard.EraseAt(p.pos);
    shard.Tidy();
  }
  return current;
}

size_t KeyDirectory::RemoveOwners(std::span<const uint32_t> owners,
                                  std::vector<size_t>* per_owner) {
  if (per_owner) per_owner->assign(owners.size(), 0);
  size_t removed = 0;
  if (owners.empty()) return 0;
  for (size_t s = 0; s < kShards; ++s) {
    Shard& shard = shards_[s];
    std::unique_lock lock(shard.mu);
    // EraseAt only moves slots at or after the hole, so re-examining `i`
    // after an erase visits every slot exactly once.
    for (size_t i = 0; i < shard.capacity();) {
      if (shard.slots[i].ref == 0) {
        ++i;
        continue;
      }
      auto it = std::ranges::find(owners, shard.OwnerAt(i));
      if (it == owners.end()) {
        ++i;
        continue;
      }
      if (per_owner) ++(*per_owner)[it - owners.begin()];
      shard.EraseAt(i);
      ++removed;
    }
    shard.Tidy();
  }
  return removed;
}

void KeyDirectory::ForEach(
    const std::function<void(std::string_view key, uint32_t owner)>& fn) const {
  for (size_t s = 0; s < kShards; ++s) {
    const Shard& shard = shards_[s];
    std::shared_lock lock(shard.mu);
    for (size_t i = 0; i < shard.capacity(); ++i) {
      const Slot& slot = shard.slots[i];
      if (slot.ref == 0) continue;
      const char* blob = shard.BlobAt(slot.ref);
      fn(ReadBlob(blob).key, ReadOwner(blob));
    }
  }
}

size_t KeyDirectory::size() const {
  size_t n = 0;
  for (size_t s = 0; s < kShards; ++s) n += shards_[s].count.load(std::memory_order_relaxed);
  return n;
}

size_t KeyDirectory::memory_bytes() const {
  size_t bytes = 0;
  for (size_t s = 0; s < kShards; ++s) {
    std::shared_lock lock(shards_[s].mu);
    bytes += shards_[s].capacity() * sizeof(Slot) + shards_[s].cap;
  }
  return bytes;
}

}  // namespace mooncake
