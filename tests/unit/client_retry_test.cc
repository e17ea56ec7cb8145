// The owner-following rules every client path shares (client/client_retry.h):
// which answers mean "the object moved", what a node that still denies the
// key after a move means, and the shape of the back-off.

#include "client/client_retry.h"

#include <gtest/gtest.h>

#include <chrono>

namespace mooncake {
namespace {

TEST(ClientRetryTest, MovedMeansNotFoundOrNotOwner) {
  EXPECT_TRUE(IsMoved(ErrorCode::kObjectNotFound));
  EXPECT_TRUE(IsMoved(ErrorCode::kNotOwner));
  EXPECT_FALSE(IsMoved(ErrorCode::kRpcFail));
  EXPECT_FALSE(IsMoved(ErrorCode::kReplicaIsNotReady));
  EXPECT_FALSE(IsMoved(ErrorCode::kObjectReplicaBusy));
}

TEST(ClientRetryTest, SettleTurnsAFinalDenialIntoNotFound) {
  EXPECT_EQ(Settle(ErrorCode::kNotOwner), ErrorCode::kObjectNotFound);
  EXPECT_EQ(Settle(ErrorCode::kObjectNotFound), ErrorCode::kObjectNotFound);
  EXPECT_EQ(Settle(ErrorCode::kRpcTimeout), ErrorCode::kRpcTimeout);
}

TEST(ClientRetryTest, BackoffGrowsAndIsCapped) {
  using Clock = std::chrono::steady_clock;
  auto slept = [](int attempt) {
    auto start = Clock::now();
    Backoff(attempt);
    return Clock::now() - start;
  };
  EXPECT_GE(slept(0), std::chrono::milliseconds(1));
  EXPECT_GE(slept(3), std::chrono::milliseconds(8));
  // Capped at 50 ms however many attempts came before.
  EXPECT_GE(slept(20), std::chrono::milliseconds(50));
  EXPECT_LT(slept(20), std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace mooncake
