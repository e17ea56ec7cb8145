#pragma once

// ObjectIndex: the worker's key -> record index (ObjectTable's map), built
// so that finding a key costs one cache miss for its slot and one for its
// record (where ObjectTable keeps the key's bytes, next to the fields a read
// uses). The std::unordered_map<std::string, Object> it replaces cost
// more on every lookup: its bucket array, the node before the key's (the
// bucket points there), the key's node (whose cached hash sits 208 bytes in,
// a line of its own), a 64-bit division per step down the chain, then the
// key's bytes. In a profile of 64-byte gets over a million keys that lookup
// was a quarter of the worker's CPU, all of it under the backend's lock.
//
// Records are allocated one by one and never move: a pointer to one stays
// valid until its key is erased (ObjectRef and Object::key_ rely on it). The
// index is an open-addressing table of 16-byte slots (the key's 64-bit hash
// and its record), a power of two in size, probed linearly, at most three
// quarters full, with backward-shift deletion (no tombstones). It doubles
// when full and halves below an eighth; either rehashes from the stored
// hashes without reading a key or moving a record. Its memory comes in huge
// pages once it is 2 MiB (common/huge_page_memory.h), so that a probe into a
// table of millions of keys is not also a TLB miss.
//
// Record is any type with `std::string_view key() const` and a static
// `Destroy(Record*)`; the index owns the records it holds and destroys them
// with it.
//
// Thread-safety: none (ObjectTable's caller holds the backend's lock).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/huge_page_memory.h"

namespace mooncake {

// The 64-bit hash ObjectIndex files a key under.
inline uint64_t ObjectKeyHash(std::string_view key) { return std::hash<std::string_view>{}(key); }

template <typename Record>
class ObjectIndex {
 public:
  ObjectIndex() = default;
  ObjectIndex(const ObjectIndex&) = delete;
  ObjectIndex& operator=(const ObjectIndex&) = delete;
  ~ObjectIndex() {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].record != nullptr) Record::Destroy(slots_[i].record);
    }
    FreeHugePageMemory(slots_, capacity_ * sizeof(Slot));
  }

  size_t size() const { return size_; }

  Record* Find(std::string_view key) const {
    if (size_ == 0) return nullptr;
    return slots_[SlotOf(key, ObjectKeyHash(key))].record;
  }

  // The record filed under `hash` for which match(record) holds, or null:
  // for a caller that kept a key's hash (and something to tell its record
  // by) instead of the key or a pointer that may dangle.
  template <typename Match>
  Record* FindHashed(uint64_t hash, Match&& match) const {
    if (size_ == 0) return nullptr;
    for (size_t i = hash & mask_; slots_[i].record != nullptr; i = (i + 1) & mask_) {
      if (slots_[i].hash == hash && match(*slots_[i].record)) return slots_[i].record;
    }
    return nullptr;
  }

  // Find for each of `keys`, calling found(i, record or null) for keys[i].
  // The keys' slots are fetched together, then their records, then the keys
  // compared, so that a batch's cache misses overlap instead of following
  // one another.
  template <typename Key, typename Found>
  void FindMany(std::span<const Key> keys, Found&& found) const {
    constexpr size_t kChunk = 16;
    for (size_t first = 0; first < keys.size(); first += kChunk) {
      const size_t count = std::min(kChunk, keys.size() - first);
      uint64_t hashes[kChunk];
      Record* candidates[kChunk];
      for (size_t i = 0; i < count; ++i) {
        hashes[i] = ObjectKeyHash(keys[first + i]);
        if (size_ != 0) __builtin_prefetch(&slots_[hashes[i] & mask_]);
      }
      for (size_t i = 0; i < count; ++i) {
        candidates[i] = FirstWithHash(hashes[i]);
        if (candidates[i] == nullptr) continue;
        const char* bytes = reinterpret_cast<const char*>(candidates[i]);
        for (size_t line = 0; line < sizeof(Record) + 64; line += 64) {
          __builtin_prefetch(bytes + line);
        }
      }
      for (size_t i = 0; i < count; ++i) {
        const auto& key = keys[first + i];
        Record* record = candidates[i];
        // Another key with the same 64-bit hash: look on past it.
        if (record != nullptr && record->key() != key)
          record = slots_[SlotOf(key, hashes[i])].record;
        found(first + i, record);
      }
    }
  }

  // The record of `key`, or a new one from make() (a Record* whose key is
  // `key`, never null; the index owns it from then on) if there is none;
  // `inserted` says which. make() is not called when the key is present.
  template <typename Make>
  std::pair<Record*, bool> FindOrInsert(std::string_view key, Make&& make) {
    Reserve(size_ + 1);
    const uint64_t hash = ObjectKeyHash(key);
    const size_t i = SlotOf(key, hash);
    if (slots_[i].record != nullptr) return {slots_[i].record, false};
    Record* made = make();
    slots_[i] = Slot{hash, made};
    ++size_;
    return {made, true};
  }

  // Erases and destroys the record of `key` (`key` may be the record's own
  // bytes); false if there is none.
  bool Erase(std::string_view key) {
    if (size_ == 0) return false;
    size_t hole = SlotOf(key, ObjectKeyHash(key));
    if (slots_[hole].record == nullptr) return false;
    Record::Destroy(slots_[hole].record);
    // Backward shift: pull later entries of the run into the hole while
    // their home is not between the hole and them (cyclically), so that
    // every key stays reachable from its home with no tombstone left.
    for (size_t next = (hole + 1) & mask_; slots_[next].record != nullptr;
         next = (next + 1) & mask_) {
      const size_t home = slots_[next].hash & mask_;
      if (((next - home) & mask_) >= ((next - hole) & mask_)) {
        slots_[hole] = slots_[next];
        hole = next;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    if (capacity_ > kMinCapacity && size_ < capacity_ / 8) Rehash(capacity_ / 2);
    return true;
  }

  // Calls fn(record) for every record, in no particular order; fn must not
  // insert or erase.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].record != nullptr) fn(*slots_[i].record);
    }
  }

  // Bytes of the slot table (the records are counted by their owner).
  size_t table_bytes() const { return capacity_ * sizeof(Slot); }

 private:
  struct Slot {
    uint64_t hash = 0;
    Record* record = nullptr;  // null: free
  };
  static constexpr size_t kMinCapacity = 64;

  // The slot holding `key`, or the free slot that ends its run (where it
  // would go). The table must not be empty of slots (capacity_ > 0).
  size_t SlotOf(std::string_view key, uint64_t hash) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.record == nullptr) return i;
      if (slot.hash == hash && slot.record->key() == key) return i;
    }
  }

  // The first record filed under `hash` (its key unchecked), or null.
  Record* FirstWithHash(uint64_t hash) const {
    if (size_ == 0) return nullptr;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.record == nullptr || slot.hash == hash) return slot.record;
    }
  }

  // Grows the table (doubling) until `count` keys fit in three quarters.
  void Reserve(size_t count) {
    if (count <= capacity_ / 4 * 3) return;
    size_t capacity = capacity_ == 0 ? kMinCapacity : capacity_ * 2;
    while (count > capacity / 4 * 3) capacity *= 2;
    Rehash(capacity);
  }

  void Rehash(size_t capacity) {
    auto* slots = static_cast<Slot*>(AllocateHugePageMemory(capacity * sizeof(Slot)));
    if (slots == nullptr) throw std::bad_alloc();
    const size_t mask = capacity - 1;
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].record == nullptr) continue;
      size_t j = slots_[i].hash & mask;
      while (slots[j].record != nullptr) j = (j + 1) & mask;
      slots[j] = slots_[i];
    }
    FreeHugePageMemory(slots_, capacity_ * sizeof(Slot));
    slots_ = slots;
    capacity_ = capacity;
    mask_ = mask;
  }

  Slot* slots_ = nullptr;
  size_t capacity_ = 0;  // 0 or a power of two
  size_t mask_ = 0;      // capacity_ - 1
  size_t size_ = 0;
};

}  // namespace mooncake
