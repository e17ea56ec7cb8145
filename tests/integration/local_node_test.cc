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

  // The registry listings a run of puts may cost: one when the
  // local node is first found missing, one more per retry period that
  // passed while they ran (a slow, loaded machine), and one spare.
  static double Allowed(Clock::time_point start) {
    auto seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return 2 + std::ceil(seconds);
  }

  TestCluster cluster_;
};

TEST_F(LocalNodeTest, AnUnregisteredLocalNodeCostsNoRegistryListingPerPut) {
  auto client = cluster_.NewClient("w2");  // no such worker yet
  ASSERT_TRUE(client);
  const double listed_before = Master(kListNodes);
  auto start = Clock::now();
  constexpr int kPuts = 40;
  PutAll(*client, "unregistered-", kPuts, "w1");
  const double listings = Master(kListNodes) - listed_before;
  // Each put listed the registry once before the local node was set aside.
  EXPECT_LE(listings, Allowed(start)) << "listings for " << kPuts << " puts";
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
  const double listed_before = Master(kListNodes);
  auto start = Clock::now();
  constexpr int kPuts = 30;
  PutAll(*client, "dead-", kPuts, "w1");
  // Before the local node was set aside, every put was refused there, then
  // listed the registry (for a new address) and asked for another node.
  const double listings = Master(kListNodes) - listed_before;
  EXPECT_LE(listings, Allowed(start)) << "listings for " << kPuts << " puts";
}

}  // namespace
}  // namespace mooncake::testing
