// Where a client without a local node puts new objects: the master's
// PickNode answer, reused for ClientConfig::pick_reuse_ms rather than asked
// before every put, and asked again when the node it named refuses a put.
// A real master and two real workers on 127.0.0.1; the master's own request
// counters say how often it was asked.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <limits>
#include <string>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_GT(cluster_.master_admin_port(), 0);
  }

  // PickNode calls the master has answered so far.
  double PickNodeCalls() {
    double n = AdminMetric(cluster_.master_admin_port(),
                           "mooncake_master_request_duration_seconds_count{op=\"pick_node\"}");
    return std::isnan(n) ? 0 : n;
  }

  // Puts (single and two-phase) that worker `node` has answered so far.
  double WorkerPutCalls(const std::string& node) {
    double total = 0;
    for (const char* op : {"put", "put_start"}) {
      double n = AdminMetric(
          cluster_.worker_admin_port(node),
          std::string("mooncake_worker_request_duration_seconds_count{op=\"") + op + "\"}");
      if (!std::isnan(n)) total += n;
    }
    return total;
  }

  std::unique_ptr<Client> ClientReusingPicksFor(int64_t ms) {
    ClientConfig config = cluster_.ClientConfigFor();  // no local node
    config.pick_reuse_ms = ms;
    return cluster_.NewClient(config);
  }

  TestCluster cluster_;
};

TEST_F(PlacementTest, PutsReuseTheMastersPickInsteadOfAskingBeforeEachPut) {
  // Given a client that reuses a pick for a minute (so that this test does
  // not depend on how fast it runs).
  auto client = ClientReusingPicksFor(60'000);
  ASSERT_TRUE(client);
  const double before = PickNodeCalls();

  // When it puts 20 small objects, singly and in a batch.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(IsOk(client->Put("reuse-" + std::to_string(i), PatternBytes(i, 1024)))) << i;
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 10; i < 20; ++i) items.emplace_back("reuse-" + std::to_string(i), "v");
  for (const auto& result : client->BatchPut(items)) ASSERT_TRUE(IsOk(result));

  // Expect the master asked once, every object on the node it named (the
  // one with the most room), and every object readable.
  EXPECT_EQ(PickNodeCalls() - before, 1);
  for (int i = 0; i < 20; ++i) {
    auto where = client->Inspect("reuse-" + std::to_string(i));
    ASSERT_TRUE(IsOk(where)) << i;
    EXPECT_EQ(where->node_id, "w1") << i;
  }
  EXPECT_TRUE(ReadsBack(*client, "reuse-3", PatternBytes(3, 1024)));
}

TEST_F(PlacementTest, WithReuseOffEveryPutAsksTheMaster) {
  auto client = ClientReusingPicksFor(0);
  ASSERT_TRUE(client);
  const double before = PickNodeCalls();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(IsOk(client->Put("ask-" + std::to_string(i), "v"))) << i;
  }
  EXPECT_EQ(PickNodeCalls() - before, 5);
}

// A reuse period past what the clock can count is capped (at an hour), not
// overflowed into "always expired".
TEST_F(PlacementTest, AHugeReusePeriodIsCappedNotOverflowed) {
  auto client = ClientReusingPicksFor(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(client);
  const double before = PickNodeCalls();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(IsOk(client->Put("capped-" + std::to_string(i), "v"))) << i;
  }
  EXPECT_EQ(PickNodeCalls() - before, 1);
}

// An object larger than the room the picked node reported is not sent there
// on the strength of an old answer: the master is asked, says no node can
// take it, and the node the old answer named never sees the put.
TEST_F(PlacementTest, AnObjectLargerThanThePickedNodesRoomIsNotSentThere) {
  auto client = ClientReusingPicksFor(60'000);
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("small", "v")));
  const double picks_before = PickNodeCalls();
  const double w1_puts_before = WorkerPutCalls("w1");
  EXPECT_TRUE(
      FailsWith(client->Put("huge", std::string(200 * kMiB, 'x')), ErrorCode::kNoAvailableHandle));
  EXPECT_EQ(PickNodeCalls() - picks_before, 1);
  EXPECT_EQ(WorkerPutCalls("w1") - w1_puts_before, 0);
}

// A picked node that dies is forgotten at the first put it refuses: that put
// lands on the other node, and so do the next ones, without a master round
// trip each.
TEST_F(PlacementTest, APickedNodeThatDiesIsReplacedAndTheReplacementReused) {
  auto client = ClientReusingPicksFor(60'000);
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("first", "v")));
  auto first = client->Inspect("first");
  ASSERT_TRUE(IsOk(first));
  ASSERT_EQ(first->node_id, "w1");

  // When w1 dies (the master still lists it until its node TTL).
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(IsOk(client->Put("after-0", "v"))) << cluster_.AllLogTails();
  const double settled = PickNodeCalls();
  for (int i = 1; i < 10; ++i) {
    ASSERT_TRUE(IsOk(client->Put("after-" + std::to_string(i), "v"))) << i;
  }

  // Expect every later put on w2, with no further master pick.
  for (int i = 0; i < 10; ++i) {
    auto where = client->Inspect("after-" + std::to_string(i));
    ASSERT_TRUE(IsOk(where)) << i;
    EXPECT_EQ(where->node_id, "w2") << i;
  }
  EXPECT_EQ(PickNodeCalls() - settled, 0);
}

}  // namespace
}  // namespace mooncake::testing
