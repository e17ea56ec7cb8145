// The readers-writer lock of the master's node table and directory shards
// (master/writer_first_mutex.h). Under lookup traffic on many connections
// some reader always held the old std::shared_mutex, and RegisterNode and
// the reaper waited seconds for it. These tests build that situation step
// by step (readers overlapping while a writer waits), without timing.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "master/writer_first_mutex.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;

// Readers hand the lock on: a new one takes it before the one inside lets
// go, as overlapping lookups on many connections do, so the lock is never
// free. A writer that waits meanwhile must get in: once it waits no new
// reader is let in, and it takes the lock when the readers inside leave.
TEST(MasterLockTest, OverlappingReadersLetAWaitingWriterIn) {
  WriterFirstSharedMutex mu;
  mu.lock_shared();  // the first reader
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    std::unique_lock lock(mu);
    writer_in = true;
  });
  // Up to 5000 hand-overs, pausing after each so that the writer, started
  // above, comes to wait; a hand-over is refused once it does. The readers
  // are all this thread: the lock counts readers, not threads, and
  // try_lock_shared never waits, so no take here can block on the writer.
  constexpr int kHandOvers = 5000;
  int hand_overs = 0;
  while (hand_overs < kHandOvers && mu.try_lock_shared()) {
    mu.unlock_shared();  // the reader that was inside leaves
    ++hand_overs;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_LT(hand_overs, kHandOvers)
      << "new readers kept getting in while a writer waited: it would wait forever";
  EXPECT_FALSE(writer_in.load()) << "the writer got in while a reader held the lock";
  mu.unlock_shared();  // the last reader leaves
  writer.join();
  EXPECT_TRUE(writer_in.load());
}

// The usual lock contracts, which std::unique_lock and std::shared_lock
// rely on.
TEST(MasterLockTest, ExcludesWritersFromReadersAndEachOther) {
  WriterFirstSharedMutex mu;
  {
    std::shared_lock a(mu);
    std::shared_lock b(mu, std::try_to_lock);
    EXPECT_TRUE(b.owns_lock()) << "readers share the lock when no writer waits";
    std::unique_lock w(mu, std::try_to_lock);
    EXPECT_FALSE(w.owns_lock());
  }
  {
    std::unique_lock w(mu);
    std::shared_lock r(mu, std::try_to_lock);
    EXPECT_FALSE(r.owns_lock());
    bool other_writer = true;
    std::thread([&] { other_writer = mu.try_lock(); }).join();
    EXPECT_FALSE(other_writer);
  }
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace mooncake
