#include "common/wake_word.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace mooncake {
namespace {

using namespace std::chrono_literals;

TEST(WakeWordTest, AValueSetBeforeTheWaitIsReturnedAtOnce) {
  WakeWord word;
  word.Set(2);
  EXPECT_EQ(word.Wait(), 2u);
  EXPECT_FALSE(word.asleep());
}

// The path that matters under load: the waiter has gone to sleep in the
// kernel, so Set() must wake it. The test waits until it is asleep (it
// yields a few times first) instead of hoping it got there.
TEST(WakeWordTest, ASleepingWaiterIsWokenWithTheValueAndWhatWasWrittenBeforeIt) {
  WakeWord word;
  int reply = 0;  // plain memory, published by Set()
  auto waiter = std::async(std::launch::async, [&] {
    uint32_t value = word.Wait();
    return std::make_pair(value, reply);
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!word.asleep() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(word.asleep()) << "the waiter never went to sleep";
  ASSERT_EQ(waiter.wait_for(20ms), std::future_status::timeout) << "returned with nothing set";
  reply = 42;
  word.Set(1);
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready) << "Set() did not wake the sleeper";
  auto [value, seen] = waiter.get();
  EXPECT_EQ(value, 1u);
  EXPECT_EQ(seen, 42);
}

// Many hand-offs between two threads, each side setting what the other waits
// for: a lost wake-up would hang here (ctest's timeout then ends it).
TEST(WakeWordTest, NoWakeUpIsLostOverManyHandOffs) {
  constexpr int kRounds = 2000;
  std::vector<WakeWord> pings(kRounds), pongs(kRounds);
  auto other = std::async(std::launch::async, [&] {
    for (int i = 0; i < kRounds; ++i) {
      if (pings[i].Wait() != 1) return false;
      pongs[i].Set(2);
    }
    return true;
  });
  for (int i = 0; i < kRounds; ++i) {
    pings[i].Set(1);
    ASSERT_EQ(pongs[i].Wait(), 2u);
  }
  ASSERT_EQ(other.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(other.get());
}

}  // namespace
}  // namespace mooncake
