// HelperThreads (client/helper_threads.h): every task runs once, queued
// work starts a thread while the bound allows even when a thread is idle,
// the bound holds, and Stop runs what is queued.

#include "client/helper_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mooncake {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until `done()`.
template <typename Done>
bool Eventually(Done&& done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

// Tasks that each wait until `n` of them run at once (or give up after a
// bound), so they finish only if that many threads took them.
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  void Arrive() {
    std::unique_lock lock(mu_);
    ++arrived_;
    all_here_.notify_all();
    met_ = all_here_.wait_for(lock, 5s, [&] { return arrived_ >= n_; }) || met_;
  }
  bool met() {
    std::lock_guard lock(mu_);
    return met_;
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable all_here_;
  int arrived_ = 0;
  bool met_ = false;
};

TEST(HelperThreadsTest, WorkQueuedBeyondTheIdleThreadsStartsAnotherThread) {
  HelperThreads helpers(4);
  // One thread, then idle.
  std::atomic<int> ran{0};
  helpers.Run([&] { ran++; });
  ASSERT_TRUE(Eventually([&] { return ran == 1 && helpers.idle_threads() == 1; }));

  // Two tasks that must run at the same time: the idle thread takes one and
  // a new thread the other.
  Rendezvous both(2);
  std::atomic<int> finished{0};
  for (int i = 0; i < 2; ++i) {
    helpers.Run([&] {
      both.Arrive();
      finished++;
    });
  }
  ASSERT_TRUE(Eventually([&] { return finished == 2; }));
  EXPECT_TRUE(both.met()) << "the second task waited for the first instead of a thread of its own";
  EXPECT_EQ(helpers.threads(), 2u);
}

TEST(HelperThreadsTest, NeverMoreThreadsThanTheBoundAndEveryTaskRunsOnce) {
  HelperThreads helpers(3);
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    helpers.Run([&] {
      int now = ++running;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(1ms);
      --running;
      ran++;
    });
  }
  ASSERT_TRUE(Eventually([&] { return ran == 50; }));
  EXPECT_LE(peak.load(), 3);
  EXPECT_LE(helpers.threads(), 3u);
}

TEST(HelperThreadsTest, StopRunsWhatIsQueuedAndLaterTasksRunOnTheCaller) {
  HelperThreads helpers(1);
  std::atomic<int> ran{0};
  for (int i = 0; i < 20; ++i) helpers.Run([&] { ran++; });
  helpers.Stop();
  EXPECT_EQ(ran.load(), 20);
  std::thread::id ran_on;
  helpers.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

}  // namespace
}  // namespace mooncake
