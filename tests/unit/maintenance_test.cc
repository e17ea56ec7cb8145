// WorkQueue and Maintenance on their own (worker/maintenance.h): the wake-up
// signal, the promotion queue and one maintenance pass.

#include "worker/maintenance.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/unit/backend_parts.h"

namespace mooncake {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

using testing::BackendParts;

TEST(WorkQueueTest, WaitReturnsAtOnceWhenSignalledAndOtherwiseAfterTheTimeout) {
  BackendParts parts({1 * kMiB});
  {
    std::lock_guard lock(parts.ctx.mu);
    parts.work.SignalLocked();
  }
  auto start = SteadyClock::now();
  parts.work.Wait(Millis{60000});
  EXPECT_LT(SteadyClock::now() - start, std::chrono::seconds(30));
  start = SteadyClock::now();
  parts.work.Wait(Millis{20});  // the signal was consumed
  EXPECT_GE(SteadyClock::now() - start, std::chrono::milliseconds(20));
}

TEST(WorkQueueTest, AnObjectIsQueuedForPromotionOnce) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("k", "v", 1);
  parts.With("k", [&](Object& o) {
    parts.work.QueuePromotionLocked(o, {.key = "k"});
    parts.work.QueuePromotionLocked(o, {.key = "k"});
    EXPECT_TRUE(o.promotion_queued);
  });
  auto queue = parts.work.TakePromotions();
  ASSERT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue.front().key, "k");
  EXPECT_TRUE(parts.work.TakePromotions().empty());
}

TEST(MaintenanceTest, APassRunsQueuedPromotions) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("k", "value", 1);
  parts.With("k", [&](Object& o) { parts.work.QueuePromotionLocked(o, {.key = "k"}); });
  parts.maintenance.RunPass();
  EXPECT_EQ(parts.TierOf("k"), 0);
  EXPECT_EQ(parts.Read("k"), "value");
  parts.With("k", [](Object& o) { EXPECT_FALSE(o.promotion_queued); });
}

TEST(MaintenanceTest, APassDiscardsAbandonedWritesAndDemotesAboveTheHighWatermark) {
  BackendOptions options;
  options.put_start_discard_timeout = Millis{0};
  options.high_watermark = 0.5;
  options.low_watermark = 0.2;
  BackendParts parts({1 * kMiB, 4 * kMiB}, options);
  ASSERT_TRUE(parts.writer.Start("abandoned", 10, {}, WriteMode::kCreate, {}, false));
  for (const char* key : {"a", "b", "c"}) parts.AddComplete(key, std::string(200 * kKiB, 'x'), 0);
  parts.maintenance.RunPass();
  EXPECT_EQ(parts.StateOf("abandoned"), ObjectState::kRemoved);
  EXPECT_FALSE(parts.mover.AnyTierAboveHighWatermark());
  EXPECT_EQ(parts.Read("a"), std::string(200 * kKiB, 'x'));
}

TEST(MaintenanceTest, APassConfirmsAdoptedObjectsThatAreDue) {
  BackendOptions options;
  options.adopt_confirm_delay = Millis{0};
  BackendParts parts({1 * kMiB}, options);
  auto handle = parts.writer.Start("k", 1, {}, WriteMode::kAdopt, {.version = 5}, false);
  ASSERT_TRUE(handle);
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, "x"));
  ASSERT_TRUE(parts.writer.End(*handle));
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kAdopted);
  parts.maintenance.RunPass();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_TRUE(parts.directory.Owns("k"));
}

}  // namespace
}  // namespace mooncake
