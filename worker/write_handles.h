#pragma once

// WriteHandles: the handles a worker gives out for writes in flight (PutStart,
// OpenForWrite's plan epoch). Whoever presents a handle may write into that
// object (PutChunk, PutEnd, Commit), so a client must not be able to derive
// another client's handle from its own: handles are a keyed permutation of
// a counter, with a random key per process. A permutation of distinct
// counter values never repeats within the process; across restarts (a
// client holding a handle from before) a new key makes a match as likely
// as guessing 63 random bits.
//
// Thread-safety: none; WritePath calls Next() under its lock.

#include <cstdint>
#include <random>

namespace mooncake {

class WriteHandles {
 public:
  WriteHandles() {
    std::random_device entropy;
    for (uint64_t& key : keys_) key = (uint64_t{entropy()} << 32) | entropy();
  }

  // The next handle: in [1, 2^63 - 1] (the wire carries it as a positive
  // i64), never one given out before by this object.
  uint64_t Next() {
    // Cycle-walking: the 64-bit permutation, re-applied until it lands in
    // range, is a permutation of the range (the counter stays in it).
    uint64_t handle = Permute(++counter_);
    while (handle == 0 || handle > kMaxHandle) handle = Permute(handle);
    return handle;
  }

 private:
  static constexpr uint64_t kMaxHandle = (uint64_t{1} << 63) - 1;
  static constexpr int kRounds = 4;

  // A balanced Feistel network over 64 bits: a bijection for any round
  // function, here a keyed splitmix64 finalizer.
  uint64_t Permute(uint64_t value) const {
    uint32_t left = static_cast<uint32_t>(value >> 32);
    uint32_t right = static_cast<uint32_t>(value);
    for (int round = 0; round < kRounds; ++round) {
      const uint32_t mixed = left ^ Mix(right ^ keys_[round]);
      left = right;
      right = mixed;
    }
    return (uint64_t{left} << 32) | right;
  }
  static uint32_t Mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<uint32_t>(x);
  }

  uint64_t keys_[kRounds];
  uint64_t counter_ = 0;
};

}  // namespace mooncake
