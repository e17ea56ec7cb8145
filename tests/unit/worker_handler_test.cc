// WorkerHandler: the Thrift face of a worker, over a real backend.

#include "worker/worker_handler.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"

namespace mooncake {
namespace {

using mooncake::testing::InMemoryDirectory;

class WorkerHandlerTest : public ::testing::Test {
 protected:
  WorkerHandlerTest()
      : requests_(WorkerHandler::OperationNames()),
        backend_(MakeTiers(), &directory_, {}),
        handler_(backend_, "w1", requests_) {}

  static std::vector<std::unique_ptr<CacheTier>> MakeTiers() {
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 4 << 20).value()));
    return tiers;
  }

  InMemoryDirectory directory_;
  RequestMetrics requests_;
  TieredCacheBackend backend_;
  WorkerHandler handler_;
};

TEST_F(WorkerHandlerTest, ReadsWaitUntilTheNodeHasAnnouncedItsKeys) {
  ASSERT_EQ(handler_.Put("k", "value", {}), rpc::ErrorCode::OK);  // writes claim at the master
  rpc::GetResult early;
  handler_.Get(early, "k", 0, 0);
  EXPECT_EQ(early.code, rpc::ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(handler_.Exist("k", false, ""), static_cast<int32_t>(ErrorCode::kReplicaIsNotReady));

  handler_.set_serving_reads(true);
  rpc::GetResult later;
  handler_.Get(later, "k", 0, 0);
  EXPECT_EQ(later.code, rpc::ErrorCode::OK);
  EXPECT_EQ(later.data, "value");
  EXPECT_EQ(handler_.Exist("k", false, ""), 1);
}

TEST_F(WorkerHandlerTest, RequestsAreCountedPerOperationAndCode) {
  handler_.set_serving_reads(true);
  rpc::GetResult missing;
  handler_.Get(missing, "absent", 0, 0);
  EXPECT_EQ(missing.code, rpc::ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_EQ(handler_.Put("", "x", {}), rpc::ErrorCode::INVALID_KEY);
  uint64_t get_errors = 0, put_errors = 0;
  for (const auto& op : requests_.Snapshot()) {
    if (op.op == "get") get_errors = op.errors;
    if (op.op == "put") put_errors = op.errors;
  }
  EXPECT_EQ(get_errors, 1u);
  EXPECT_EQ(put_errors, 1u);
}

}  // namespace
}  // namespace mooncake
