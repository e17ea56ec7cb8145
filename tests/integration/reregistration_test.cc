// A worker the master declared dead registers again, once, however many of
// its calls learn it at the same moment, and every key whose put succeeded
// is known to the master afterwards.
//
// The race is forced: the worker is stopped (SIGSTOP) while puts from
// several clients sit unread in its sockets, and resumed only once the
// master has restarted (and so forgotten it), so their claims are refused
// together, before the worker's next heartbeat.

#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

constexpr size_t kClients = 24;

std::string KeyOf(size_t i) { return "after-" + std::to_string(i); }
std::string ValueOf(size_t i) { return std::string(4096, static_cast<char>('a' + i)); }

class ReregistrationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (stopped_) cluster_.Signal("w1", SIGCONT);
    if (HasFailure()) std::cerr << cluster_.AllLogTails(40);
  }

  TestCluster cluster_;
  bool stopped_ = false;
};

TEST_F(ReregistrationTest, ClaimsRefusedTogetherRegisterOnceAndEveryPutKeyIsKnown) {
  ASSERT_TRUE(cluster_.StartMaster());
  // A heartbeat far apart, so the puts' claims, not the heartbeat, are the
  // first to find that the master forgot this node.
  ASSERT_TRUE(
      cluster_.StartWorker("w1", {.dram = 64 << 20, .ssd = 0, .heartbeat_interval_ms = 5000}));
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.push_back(cluster_.NewClient());
    ASSERT_TRUE(clients.back());
    // Each client connects to w1 now, while it answers.
    ASSERT_TRUE(IsOk(clients.back()->Put("before-" + std::to_string(i), "v")));
  }

  // The puts wait, unread, in the stopped worker's sockets while the master
  // restarts and so forgets every node.
  stopped_ = cluster_.Signal("w1", SIGSTOP);
  ASSERT_TRUE(stopped_);
  std::vector<std::future<Result<void>>> puts;
  for (size_t i = 0; i < kClients; ++i) {
    puts.push_back(
        std::async(std::launch::async, [&, i] { return clients[i]->Put(KeyOf(i), ValueOf(i)); }));
  }
  ASSERT_TRUE(Eventually(
      [&] { return ConnectionsWithUnreadBytes(cluster_.worker_port("w1")) >= kClients; }));
  ASSERT_TRUE(cluster_.RestartMaster());
  ASSERT_TRUE(cluster_.Signal("w1", SIGCONT));
  stopped_ = false;

  std::vector<size_t> stored;
  for (size_t i = 0; i < kClients; ++i) {
    if (IsOk(puts[i].get())) stored.push_back(i);
  }
  EXPECT_EQ(stored.size(), kClients);
  // One registration answers every claim refused with it: each extra one
  // would purge what was claimed under the one before.
  const int admin = cluster_.master_admin_port();
  EXPECT_EQ(MasterRequestCount(admin, "register_node"), 1);
  for (size_t i : stored) {
    auto owner = Http(admin, "GET", "/keys/" + KeyOf(i));
    ASSERT_TRUE(owner);
    EXPECT_EQ(owner->status, 200) << KeyOf(i) << ": " << owner->body;
    EXPECT_TRUE(Holds(clients[0]->Get(KeyOf(i)), ValueOf(i))) << KeyOf(i);
  }
}

// How many times `text` appears in the last lines of `name`'s log.
size_t LogCount(const TestCluster& cluster, const std::string& name, const std::string& text) {
  std::string tail = cluster.LogTail(name, 400);
  size_t count = 0;
  for (size_t at = tail.find(text); at != std::string::npos; at = tail.find(text, at + 1)) ++count;
  return count;
}

// A key removed while the worker's announcement is on its way was released
// at a master that did not know it yet; the announcement must not leave the
// master naming this node for it. The window is held open by a test hook.
TEST_F(ReregistrationTest, KeysRemovedWhileAnnouncingAreNotLeftAtTheMaster) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 << 20,
                                          .ssd = 0,
                                          .heartbeat_interval_ms = 100,
                                          .extra_args = {"--test-announce-delay-ms", "1500"}}));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr size_t kKeys = 10;
  for (size_t i = 0; i < kKeys; ++i) ASSERT_TRUE(IsOk(client->Put(KeyOf(i), ValueOf(i))));
  const std::string hook = "test hook: announcing in";
  ASSERT_EQ(LogCount(cluster_, "w1", hook), 1u);  // the first registration's

  // The restarted master knows nothing; the worker registers again and
  // waits, keys listed, before announcing them.
  ASSERT_TRUE(cluster_.RestartMaster());
  ASSERT_TRUE(Eventually([&] { return LogCount(cluster_, "w1", hook) == 2; }));
  for (size_t i = 0; i < kKeys / 2; ++i) {
    ASSERT_TRUE(IsOk(client->Remove(KeyOf(i), /*force=*/true))) << KeyOf(i);
  }
  const std::string registered = "registered with master";
  ASSERT_TRUE(Eventually([&] { return LogCount(cluster_, "w1", registered) == 2; }));

  const int admin = cluster_.master_admin_port();
  for (size_t i = 0; i < kKeys; ++i) {
    auto owner = Http(admin, "GET", "/keys/" + KeyOf(i));
    ASSERT_TRUE(owner);
    EXPECT_EQ(owner->status, i < kKeys / 2 ? 404 : 200) << KeyOf(i) << ": " << owner->body;
  }
  EXPECT_TRUE(FailsWith(client->Get(KeyOf(0)), ErrorCode::kObjectNotFound));
  EXPECT_TRUE(Holds(client->Get(KeyOf(kKeys - 1)), ValueOf(kKeys - 1)));
}

}  // namespace
}  // namespace mooncake::testing
