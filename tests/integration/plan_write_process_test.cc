// Plan-based writes across processes: the worker (a mooncake-worker process)
// owns the memory, and a producer in another process (this test, or
// mooncake-cli --zero-copy) maps it, writes the object's bytes itself and
// commits. Runs on every machine through the DRAM tier; the VRAM variant is
// in gpu_worker_test.cc.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "client/client.h"
#include "client/shared_mapping.h"
#include "tests/integration/test_cluster.h"
#include "tests/test_bytes.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class PlanWriteProcessTest : public ::testing::Test {
 protected:
  // Given a master and worker w1 with DRAM and SSD, and a client on w1's node.
  void GivenOneNode(std::vector<std::string> worker_args = {}) {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.extra_args = std::move(worker_args)}));
    client_ = cluster_.NewClient("w1");
    ASSERT_TRUE(client_);
  }

  // The producer's part: map the plan and write `value` into it.
  static ::testing::AssertionResult Produce(const WritePlan& plan, const std::string& value) {
    std::string why;
    auto mapping = SharedMapping::Map(plan.memory, plan.offset, value.size(), &why);
    if (!mapping) return ::testing::AssertionFailure() << "Map failed: " << why;
    if (auto copied = (*mapping)->CopyIn(0, Bytes(value)); !copied) {
      return ::testing::AssertionFailure() << "CopyIn failed: " << ToString(copied.error());
    }
    return ::testing::AssertionSuccess();
  }

  uint64_t DramUsed() {
    auto stats = client_->Stats("w1");
    return stats ? stats->tiers.at(0).usage.used : ~0ull;
  }

  TestCluster cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(PlanWriteProcessTest, AProducerProcessWritesIntoTheWorkersDramAndCommitPublishes) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode());
  const std::string value = PatternBytes(1, 5 * kMiB + 17);  // more than one RPC chunk
  auto plan = client_->OpenForWrite("plan/a", value.size());
  ASSERT_TRUE(IsOk(plan));
  EXPECT_EQ(plan->node_id, "w1");
  EXPECT_EQ(plan->tier, "dram");
  EXPECT_EQ(plan->memory.kind, MemoryRegionHandle::Kind::kHostFile);
  EXPECT_GT(plan->timeout_ms, 0);
  ASSERT_TRUE(Produce(*plan, value));

  // Written but not committed: no reader anywhere sees the key.
  EXPECT_TRUE(FailsWith(client_->Get("plan/a"), ErrorCode::kObjectNotFound));
  EXPECT_FALSE(client_->Exist("plan/a").value_or(true));
  EXPECT_EQ(cluster_.RunCli({"get", "plan/a"}).exit_code, 1);

  ASSERT_TRUE(IsOk(client_->Commit(*plan)));
  EXPECT_TRUE(ReadsBack(*client_, "plan/a", value));
  auto other = cluster_.NewClient();  // a client with no local node, no caches
  ASSERT_TRUE(other);
  EXPECT_TRUE(ReadsBack(*other, "plan/a", value));
  // A plan commits once.
  EXPECT_TRUE(FailsWith(client_->Commit(*plan), ErrorCode::kIllegalClient));
}

TEST_F(PlanWriteProcessTest, GetLocationLetsALocalReaderMapTheObject) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode());
  const std::string value = PatternBytes(2, 300000);
  ASSERT_TRUE(IsOk(client_->Put("loc", value)));
  auto placement = client_->GetLocation("loc");
  ASSERT_TRUE(IsOk(placement));
  EXPECT_EQ(placement->node_id, "w1");
  EXPECT_EQ(placement->tier, "dram");
  EXPECT_EQ(placement->size, value.size());
  EXPECT_GT(placement->hold_ms, 0);
  std::string why;
  auto mapping = SharedMapping::Map(placement->memory, placement->offset, placement->size, &why);
  ASSERT_TRUE(mapping) << why;
  std::string seen(value.size(), '\0');
  ASSERT_TRUE((*mapping)->CopyOut(0, std::as_writable_bytes(std::span(seen.data(), seen.size()))));
  EXPECT_EQ(seen, value);
  // Same version as a Get: nothing rewrote it while it was read.
  EXPECT_EQ(client_->Get("loc")->version, placement->version);
  EXPECT_TRUE(FailsWith(client_->GetLocation("absent"), ErrorCode::kObjectNotFound));
}

TEST_F(PlanWriteProcessTest, AnUncommittedPlanIsDiscardedAfterTheTimeout) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode({"--put-start-discard-timeout-ms", "300"}));
  ASSERT_EQ(DramUsed(), 0u);
  auto plan = client_->OpenForWrite("plan/late", kMiB);
  ASSERT_TRUE(IsOk(plan));
  EXPECT_EQ(plan->timeout_ms, 300);
  EXPECT_GE(DramUsed(), kMiB);
  // Discarded, then kept out of use for one more timeout (a late producer
  // may still write), then freed.
  EXPECT_TRUE(Eventually([&] { return DramUsed() == 0; }, 10s));
  EXPECT_TRUE(FailsWith(client_->Commit(*plan), ErrorCode::kIllegalClient));
  EXPECT_TRUE(FailsWith(client_->Get("plan/late"), ErrorCode::kObjectNotFound));
}

TEST_F(PlanWriteProcessTest, AnUpsertPreemptsAnOpenPlanAndARevokedPlanLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode());
  auto plan = client_->OpenForWrite("plan/u", 4096);
  ASSERT_TRUE(IsOk(plan));
  ASSERT_TRUE(Produce(*plan, PatternBytes(3, 4096)));
  const std::string winner = PatternBytes(4, 4096);
  ASSERT_TRUE(IsOk(client_->Upsert("plan/u", winner)));
  EXPECT_TRUE(FailsWith(client_->Commit(*plan), ErrorCode::kIllegalClient));
  EXPECT_TRUE(ReadsBack(*client_, "plan/u", winner));

  auto revoked = client_->OpenForWrite("plan/r", 4096);
  ASSERT_TRUE(IsOk(revoked));
  ASSERT_TRUE(IsOk(client_->Revoke(*revoked)));
  EXPECT_TRUE(FailsWith(client_->Commit(*revoked), ErrorCode::kIllegalClient));
  EXPECT_TRUE(FailsWith(client_->Get("plan/r"), ErrorCode::kObjectNotFound));
}

TEST_F(PlanWriteProcessTest, AnUpsertPlanReplacesTheValueInPlace) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode());
  ASSERT_TRUE(IsOk(client_->Put("plan/v", PatternBytes(5, 65536))));
  auto before = client_->Inspect("plan/v");
  ASSERT_TRUE(IsOk(before));
  auto plan = client_->OpenForWrite("plan/v", 65536, {}, /*upsert=*/true);
  ASSERT_TRUE(IsOk(plan));
  EXPECT_EQ(static_cast<int64_t>(plan->offset), before->offset);
  EXPECT_TRUE(FailsWith(client_->OpenForWrite("plan/v", 65536), ErrorCode::kObjectAlreadyExists));
  const std::string value = PatternBytes(6, 65536);
  ASSERT_TRUE(Produce(*plan, value));
  ASSERT_TRUE(IsOk(client_->Commit(*plan)));
  EXPECT_TRUE(ReadsBack(*client_, "plan/v", value));
  EXPECT_GT(client_->Inspect("plan/v")->version, before->version);
}

TEST_F(PlanWriteProcessTest, CliZeroCopyPutAndLocate) {
  ASSERT_NO_FATAL_FAILURE(GivenOneNode());
  const std::string value = PatternBytes(7, 6 * kMiB + 3);
  const std::string path = (cluster_.dir() / "zero-copy.bin").string();
  std::ofstream(path, std::ios::binary) << value;

  auto put = cluster_.RunCli({"--node", "w1", "put", "zc", "--file", path, "--zero-copy"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  EXPECT_TRUE(ReadsBack(*client_, "zc", value));
  auto small = cluster_.RunCli({"--node", "w1", "upsert", "zc-small", "hello", "--zero-copy"});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_TRUE(ReadsBack(*client_, "zc-small", "hello"));

  auto located = cluster_.RunCli({"locate", "zc", "--json"});
  ASSERT_EQ(located.exit_code, 0) << located.err;
  EXPECT_NE(located.out.find("\"tier\":\"dram\""), std::string::npos) << located.out;
  EXPECT_NE(located.out.find("\"kind\":\"host_file\""), std::string::npos) << located.out;
  EXPECT_NE(located.out.find("\"size\":6291459"), std::string::npos) << located.out;
  EXPECT_EQ(cluster_.RunCli({"locate", "nope"}).exit_code, 1);

  // Memory only: --tier ssd cannot be written in place.
  auto ssd = cluster_.RunCli({"put", "zc-ssd", "x", "--zero-copy", "--tier", "ssd"});
  EXPECT_EQ(ssd.exit_code, 2) << ssd.err;
}

}  // namespace
}  // namespace mooncake::testing
