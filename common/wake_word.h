#pragma once

// WakeWord: a one-shot hand-off from one thread to another that sleeps until
// it comes: the waiter blocks in Wait() until some thread Set()s a value.
// CallCombiner's callers wait on one each.
//
// Why not std::atomic<uint32_t>::wait/notify_one: libstdc++ 12's notify_one
// makes a futex wake call whenever any thread waits on one of 16 shared
// slots, which under load is nearly always, and most of those calls found
// nobody asleep. Here the waiter marks itself asleep before it sleeps, and
// Set() enters the kernel only for a waiter so marked.
//
// Before it sleeps, the waiter yields its CPU up to kYields times. A waiter
// here waits for a round trip (tens to hundreds of microseconds), and on a
// busy machine a thread that sleeps costs its waker a futex call and then a
// wake-up, which on a virtual machine is an inter-processor interrupt; a
// thread that yields stays runnable and finds its value when it next runs.
// libstdc++ yields 4 times. With 16, CallCombiner's callers (the client's
// combined gets and puts, the worker's combined claims) went, at 16 threads
// of 4 KiB calls, from 42-52 k to 60-75 k puts/s and 121-137 k to 146-155 k
// gets/s, and at 64 threads from 119-121 k to 135-140 k puts/s (alternating
// sittings on a 2-core VM). When nothing else wants the CPU a yield returns
// at once, so a waiter spends at most about 16 system calls before it
// sleeps; only callers that queue behind a call in flight wait at all.
//
// Thread-safety: one thread calls Wait(), one calls Set(), once each. The
// word must outlive Set() (CallCombiner shares its waiters for that).

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace mooncake {

class WakeWord {
 public:
  static constexpr uint32_t kUnset = 0;

  // Blocks until a value other than kUnset is set; returns it. What the
  // setting thread wrote before Set() is visible to the caller afterwards.
  uint32_t Wait() {
    uint32_t value = word_.load(std::memory_order_acquire);
    for (int i = 0; value == kUnset && i < kYields; ++i) {
      sched_yield();
      value = word_.load(std::memory_order_acquire);
    }
    if (value != kUnset) return value;
    uint32_t expected = kUnset;
    if (!word_.compare_exchange_strong(expected, kAsleep, std::memory_order_acquire)) {
      return expected;  // set meanwhile
    }
    while (true) {
      // Returns at once if the word no longer holds kAsleep; a spurious
      // wake-up (a signal, or a wake meant for an earlier word at this
      // address) just looks again.
      Futex(FUTEX_WAIT_PRIVATE, kAsleep);
      value = word_.load(std::memory_order_acquire);
      if (value != kAsleep) return value;
    }
  }

  // Hands `value` (neither kUnset nor UINT32_MAX) to the waiter, waking it
  // if it sleeps.
  void Set(uint32_t value) {
    if (word_.exchange(value, std::memory_order_acq_rel) == kAsleep) Futex(FUTEX_WAKE_PRIVATE, 1);
  }

  // Whether the waiter sleeps in the kernel now (for tests: a Set() then
  // has to wake it).
  bool asleep() const { return word_.load(std::memory_order_acquire) == kAsleep; }

 private:
  static constexpr uint32_t kAsleep = UINT32_MAX;  // the waiter sleeps in the kernel
  static constexpr int kYields = 16;               // before it sleeps (see above)

  void Futex(int op, uint32_t value) {
    // The word is a plain 32-bit integer in memory (lock-free, no padding),
    // which is what the kernel reads.
    static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), op, value, nullptr, nullptr, 0);
  }

  std::atomic<uint32_t> word_{kUnset};
};

}  // namespace mooncake
