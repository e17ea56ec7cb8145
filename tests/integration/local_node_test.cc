// A client's local node (ClientConfig::local_node) that cannot take puts:
// not registered yet, or registered but gone. Puts then go where the master
// picks, and the registry is not listed again for every put: a co-located
// worker that is down must not turn each put into a ListNodes call (and a
// warning line) at the master. Once the worker is back, puts go local again.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kListNodes = "mooncake_master_requests_total{op=\"list_nodes\",code=\"OK\"}";

class LocalNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1"));
    ASSERT_GT(cluster_.master_admin_port(), 0);
  }

  // A master counter; 0 while the series has not been written.
  double Master(const std::string& series) {
    double v = AdminMetric(cluster_.master_admin_port(), series);
    return std::isnan(v) ? 0 : v;
  }

  // Puts `count` keys "<prefix><i>", each of which must land on `node`.
  void PutAll(Client& client, const std::string& prefix, int count, const std::string& node) {
    for (int i = 0; i < count; ++i) {
      std::string key = prefix + std::to_string(i);
      ASSERT_TRUE(IsOk(client.Put(key, PatternBytes(i, 4096)))) << key;
      auto where = client.Inspect(key);
      ASSERT_TRUE(IsOk(where)) << key;
      ASSERT_EQ(where->node_id, node) << key;
    }
  }

  // Puts `count` keys to `node`, as PutAll, and checks the registry
  // listings they cost at the master: one when the local node is first
  // found unusable, one more per retry period that passed while they ran
  // (a slow, loaded machine), and one spare. Returns the listings.
  double PutAllCountingListings(Client& client, const std::string& prefix, int count,
                                const std::string& node) {
    const double before = Master(kListNodes);
    const auto start = Clock::now();
    PutAll(client, prefix, count, node);
    const double listings = Master(kListNodes) - before;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LE(listings, 2 + std::ceil(seconds)) << "listings for " << count << " puts";
    return listings;
  }

  TestCluster cluster_;
};

TEST_F(LocalNodeTest, AnUnregisteredLocalNodeCostsNoRegistryListingPerPut) {
  auto client = cluster_.NewClient("w2");  // no such worker yet
  ASSERT_TRUE(client);
  // Without the set-aside, each of the puts listed the registry once.
  const double listings = PutAllCountingListings(*client, "unregistered-", 40, "w1");
  EXPECT_GE(listings, 1) << "the missing local node was never looked up";
}

TEST_F(LocalNodeTest, ALocalNodeThatRegistersLaterTakesThePutsAgain) {
  auto client = cluster_.NewClient("w2");
  ASSERT_TRUE(client);
  PutAll(*client, "before-", 3, "w1");
  ASSERT_TRUE(cluster_.StartWorker("w2"));
  // Within a retry period or two of w2's registration, puts go to w2.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string landed;
  for (int i = 0; Clock::now() < deadline; ++i) {
    std::string key = "after-" + std::to_string(i);
    ASSERT_TRUE(IsOk(client->Put(key, PatternBytes(i, 4096)))) << key;
    auto where = client->Inspect(key);
    ASSERT_TRUE(IsOk(where)) << key;
    landed = where->node_id;
    if (landed == "w2") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(landed, "w2") << "puts never went to the local node once it registered";
}

TEST_F(LocalNodeTest, ALocalNodeThatDiedIsSetAsideInsteadOfTriedByEveryPut) {
  ASSERT_TRUE(cluster_.StartWorker("w2"));
  auto client = cluster_.NewClient("w2");
  ASSERT_TRUE(client);
  PutAll(*client, "alive-", 2, "w2");
  // Killed, it stays in the registry (alive) until its heartbeats are
  // missed: the client still has its address and finds the port closed.
  cluster_.KillWorker("w2", SIGKILL);
  // Without the set-aside, every put was refused there, then listed the
  // registry (for a new address) and asked the master for another node.
  PutAllCountingListings(*client, "dead-", 30, "w1");
}

// A BatchUpsert of keys no node holds yet places them as a put does. With the
// local node dead but still registered, they land on the other node, as
// BatchPut and Upsert would place them, and so does the next batch (it used to
// fail with RPC_FAIL for every new key, on every call).
TEST_F(LocalNodeTest, ABatchUpsertOfNewKeysWhileTheLocalNodeIsDownLandsElsewhere) {
  ASSERT_TRUE(cluster_.StartWorker("w2"));
  auto client = cluster_.NewClient("w2");
  ASSERT_TRUE(client);
  PutAll(*client, "alive-", 1, "w2");
  cluster_.KillWorker("w2", SIGKILL);  // still registered until node_ttl
  for (const std::string batch : {"first-", "second-"}) {
    SCOPED_TRACE(batch);
    const std::vector<std::pair<std::string, std::string>> items = {{batch + "a", "value a"},
                                                                    {batch + "b", "value b"}};
    auto results = client->BatchUpsert(items);
    ASSERT_EQ(results.size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& [key, value] = items[i];
      ASSERT_TRUE(IsOk(results[i])) << key;
      EXPECT_TRUE(ReadsBack(*client, key, value)) << key;
      auto where = client->Inspect(key);
      ASSERT_TRUE(IsOk(where)) << key;
      EXPECT_EQ(where->node_id, "w1") << key;
    }
  }
}

}  // namespace
}  // namespace mooncake::testing
