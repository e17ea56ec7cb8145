// What a client is told matches what the cluster holds: a read that follows
// its key to another node mid-way starts over there (one value, never pieces
// of two), and a put of a key that exists is refused, even when its first
// attempt failed and it was retried elsewhere.

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "client/client.h"
#include "client/client_chunked_io.h"
#include "client/client_router.h"
#include "client/client_writes.h"
#include "common/status.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

class ClientConsistencyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  TestCluster cluster_;
};

// Versions count per worker, so a value put again on another node can carry
// the old one's version and size. A read that had taken the first chunk of
// the old value must not finish with the new value's remaining chunks.
TEST_F(ClientConsistencyTest, AReadThatFollowsARePutKeyReturnsOnlyTheNewValue) {
  // Given w2, then w1: each starts its versions at its start time, so w1's
  // are not below w2's.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32 << 20, .ssd = 0}));
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 << 20, .ssd = 64 << 20}));
  auto reader = cluster_.NewClient();
  auto writer = cluster_.NewClient();
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(reader && writer && on_w2);

  // And on w1 a seed object (version s) on SSD, then "k" (version s + 1):
  // two chunks, so a read of it takes two calls.
  const std::string old_value(2 * kRpcChunkBytes, 'o');
  const std::string new_value(2 * kRpcChunkBytes, 'n');
  ASSERT_TRUE(IsOk(writer->Put("seed", "s", {.preferred_node = "w1", .preferred_tier = "ssd"})));
  ASSERT_TRUE(IsOk(writer->Put("k", old_value, {.preferred_node = "w1"})));
  auto old_info = writer->Inspect("k");
  ASSERT_TRUE(IsOk(old_info));
  // And the seed moved to w2 by a prefetch from there: a move keeps the
  // version, and w2 numbers its next object past it, s + 1.
  ASSERT_TRUE(IsOk(on_w2->Exist("seed", /*prefetch=*/true)));
  ASSERT_TRUE(Eventually([&] {
    auto info = writer->Inspect("seed");
    return info && info->node_id == "w2";
  })) << "the prefetch did not move the seed to w2";

  // When, after the reader took the first chunk from w1, the key is removed
  // and put again on w2, with the old value's version and size.
  bool replaced = false;
  int64_t new_version = -1;
  auto replace = [&](uint64_t done, uint64_t total) {
    if (replaced || done >= total) return;
    replaced = true;
    ASSERT_TRUE(IsOk(writer->Remove("k", /*force=*/true)));
    ASSERT_TRUE(IsOk(writer->Put("k", new_value, {.preferred_node = "w2"})));
    auto info = writer->Inspect("k");
    ASSERT_TRUE(IsOk(info));
    EXPECT_EQ(info->node_id, "w2");
    new_version = info->version;
  };
  std::stringstream out;
  auto read = reader->GetStream("k", out, replace);

  // Expect the read to deliver the new value whole.
  ASSERT_TRUE(replaced);
  ASSERT_EQ(new_version, old_info->version) << "the case needs equal versions";
  ASSERT_TRUE(IsOk(read));
  EXPECT_EQ(*read, new_value.size());
  const std::string got = out.str();
  EXPECT_TRUE(got == new_value) << "bytes of the old value: "
                                << std::count(got.begin(), got.end(), 'o');
}

// Puts never overwrite. A put whose first attempt failed with RPC_FAIL
// before reaching its node is retried elsewhere; when the key already exists
// on that first node, the retry finds it taken and the caller is told so,
// not OK: its value was stored nowhere.
TEST_F(ClientConsistencyTest, APutOfAnExistingKeyRetriedAfterRpcFailIsRefused) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 << 20, .ssd = 0}));
  ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 << 20, .ssd = 0}));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  // Given "k" already on w1, put there earlier.
  ASSERT_TRUE(IsOk(client->Put("k", "first", {.preferred_node = "w1"})));
  // And a router co-located with w1, so w1 is the node it picks first, whose
  // first attempt fails with RPC_FAIL without reaching any node.
  ClientRouter router(cluster_.ClientConfigFor("w1"));
  const std::string value = "second";
  int attempts = 0;
  std::string first_node;
  WriteAttempt attempt = [&](const Owner& owner) -> Result<void> {
    if (attempts++ == 0) {
      first_node = owner.node_id;
      return Err(ErrorCode::kRpcFail);
    }
    return PutValue(owner, "k", value, ToRpcConfig({}));
  };

  // When the put is placed (and retried).
  auto put = PutPlaced(router, "k", value.size(), {}, attempt, [] { return true; });

  // Expect OBJECT_ALREADY_EXISTS, and the first value still on w1.
  EXPECT_EQ(first_node, "w1");
  EXPECT_GE(attempts, 2) << "the put was not retried";
  ASSERT_FALSE(IsOk(put));
  EXPECT_EQ(put.error(), ErrorCode::kObjectAlreadyExists);
  auto got = client->Get("k");
  ASSERT_TRUE(IsOk(got));
  EXPECT_EQ(got->data, "first");
  EXPECT_EQ(client->Inspect("k")->node_id, "w1");
}

// A key moved to a node that restarted on another port (same node id) since
// this client last talked to it. The old owner's hint names the node; the
// address the client has for it is stale. The read still finds the key at
// the node's new address (it used to fail with RPC_FAIL).
TEST_F(ClientConsistencyTest, AReadFollowingAHintToANodeThatRestartedOnAnotherPortFindsIt) {
  ASSERT_TRUE(cluster_.StartMaster());
  // The key stays on w1's SSD when read, so that a prefetch moves it.
  const WorkerOptions fast_adopt{.promote_on_get = false,
                                 .extra_args = {"--adopt-confirm-delay-ms", "500"}};
  ASSERT_TRUE(cluster_.StartWorker("w1", fast_adopt));
  ASSERT_TRUE(cluster_.StartWorker("w2", fast_adopt));
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  PutOptions on_w1_ssd;
  on_w1_ssd.preferred_node = "w1";
  on_w1_ssd.preferred_tier = "ssd";
  const std::string value = PatternBytes(3, 64 << 10);
  ASSERT_TRUE(IsOk(reader->Put("k", value, on_w1_ssd)));
  ASSERT_TRUE(ReadsBack(*reader, "k", value));  // remembers w1 as the owner
  ASSERT_TRUE(IsOk(reader->Stats("w2")));       // and w2's first address
  const int old_port = cluster_.worker_port("w2");
  ASSERT_TRUE(cluster_.RestartWorker("w2"));
  ASSERT_NE(cluster_.worker_port("w2"), old_port);
  // A client on w2 prefetches the key: it moves from w1 to w2.
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(on_w2);
  ASSERT_TRUE(IsOk(on_w2->Exist("k", /*prefetch=*/true)));
  ASSERT_TRUE(Eventually([&] {
    auto info = on_w2->Inspect("k");
    return info && info->node_id == "w2" && info->state == "complete";
  }));
  EXPECT_TRUE(ReadsBack(*reader, "k", value));
}

// A node's counters, and a plan's commit, reach a node that restarted on
// another port: the client asks the master for the registry once when the
// address it cached refuses the call.
TEST_F(ClientConsistencyTest, StatsAndPlanCallsReachANodeThatRestartedOnAnotherPort) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1"));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Stats("w1")));  // caches w1's first address
  auto stale_plan = client->OpenForWrite("planned", 4096, {.preferred_node = "w1"});
  ASSERT_TRUE(IsOk(stale_plan)) << ToString(stale_plan.error());
  const int old_port = cluster_.worker_port("w1");
  ASSERT_TRUE(cluster_.RestartWorker("w1"));
  ASSERT_NE(cluster_.worker_port("w1"), old_port);
  auto stats = client->Stats("w1");
  ASSERT_TRUE(IsOk(stats)) << ToString(stats.error());
  EXPECT_EQ(stats->node_id, "w1");
  // The restarted node never saw the plan: its commit is refused as one
  // from a writer it does not know, not as an unreachable node.
  auto committed = client->Commit(*stale_plan);
  ASSERT_FALSE(IsOk(committed));
  EXPECT_EQ(committed.error(), ErrorCode::kIllegalClient);
}

}  // namespace
}  // namespace mooncake::testing
