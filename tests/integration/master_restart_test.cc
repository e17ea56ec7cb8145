// A master without --etcd restarted under live workers (a crash, an upgrade,
// systemctl restart), with real processes: it starts with an empty
// directory and the workers re-announce their keys only at their next
// heartbeat. Until its rebuild window (--rebuild-ms) passes it answers key
// calls NOT_LEADER and names itself, so callers wait instead of hearing a
// verdict from the empty directory: a get "not found", a remove "not found"
// that the re-announcement then undoes, a put of an existing key that
// succeeds and makes the old holder drop its copy (docs/operations.md).

#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

// The master's /readyz: status code and body; status 0 when unreadable.
std::pair<int, nlohmann::json> Readiness(int admin_port) {
  auto reply = Http(admin_port, "GET", "/readyz");
  if (!reply) return {0, nullptr};
  return {reply->status, nlohmann::json::parse(reply->body, nullptr, false)};
}

TEST(MasterRestartTest, KeyCallsWaitForTheWorkersToReannounceInsteadOfAnsweringFromNothing) {
  // Given a master whose rebuild window (5 s) is well past the heartbeat of
  // w1 (2 s), which holds three keys, and w2, which heartbeats every 200 ms
  // and so re-registers long before w1 re-announces.
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster({"--rebuild-ms", "5000"}));
  ASSERT_TRUE(cluster.StartWorker("w1", {.heartbeat_interval_ms = 2000}));
  ASSERT_TRUE(cluster.StartWorker("w2", {.heartbeat_interval_ms = 200}));
  auto on_w1 = cluster.NewClient("w1");
  ASSERT_TRUE(on_w1);
  // The first puts wait out the first start's window.
  ASSERT_TRUE(IsOk(on_w1->Put("kept", "v1")));
  ASSERT_TRUE(IsOk(on_w1->Put("removed", "r1")));
  ASSERT_TRUE(IsOk(on_w1->Put("looked-up", "g1")));
  // Clients that have never looked these keys up (no owner cached): each
  // call of theirs asks the master.
  auto getter = cluster.NewClient();
  auto remover = cluster.NewClient();
  auto on_w2 = cluster.NewClient("w2");
  ASSERT_TRUE(getter && remover && on_w2);

  // When the master is killed and started again on the same port.
  cluster.KillMaster(SIGKILL);
  ASSERT_TRUE(cluster.RestartMaster());

  // Then it says it is not ready while it rebuilds.
  auto [status, ready] = Readiness(cluster.master_admin_port());
  EXPECT_EQ(status, 503) << ready.dump();
  if (ready.is_object()) EXPECT_EQ(ready["ha_role"], "rebuilding") << ready.dump();

  // And calls made at once wait for the rebuild instead of answering from an
  // empty directory.
  auto get = std::async(std::launch::async, [&] { return getter->Get("looked-up"); });
  auto remove = std::async(std::launch::async, [&] { return remover->Remove("removed"); });
  auto put = std::async(std::launch::async, [&] {
    // Through w2, which may not have re-registered yet (NODE_NOT_FOUND).
    Result<void> r = Err(ErrorCode::kNodeNotFound);
    for (int i = 0; i < 100 && !r && r.error() == ErrorCode::kNodeNotFound; ++i) {
      r = on_w2->Put("kept", "v2");
      if (!r && r.error() == ErrorCode::kNodeNotFound) std::this_thread::sleep_for(100ms);
    }
    return r;
  });
  EXPECT_TRUE(Holds(get.get(), "g1")) << "a get answered from the empty directory";
  EXPECT_TRUE(IsOk(remove.get())) << "a remove answered from the empty directory";
  EXPECT_TRUE(FailsWith(put.get(), ErrorCode::kObjectAlreadyExists))
      << "a put of a key w1 holds succeeded before w1 re-announced it";

  // Expect, once the window is over, the old value kept, the removed key
  // gone for good (not brought back by w1's announcement), and the master
  // ready.
  EXPECT_TRUE(Eventually([&] { return Readiness(cluster.master_admin_port()).first == 200; }, 15s));
  EXPECT_EQ(Readiness(cluster.master_admin_port()).second["ha_role"], "standalone");
  EXPECT_TRUE(ReadsBack(*getter, "kept", "v1"));
  EXPECT_TRUE(FailsWith(getter->Get("removed"), ErrorCode::kObjectNotFound));
  auto owner = getter->Inspect("kept");
  ASSERT_TRUE(IsOk(owner));
  EXPECT_EQ(owner->node_id, "w1");
  EXPECT_EQ(cluster.LogTail("w1", 400).find("dropping local copy owned elsewhere"),
            std::string::npos)
      << "w1 dropped its copy of a key another put took over";
}

}  // namespace
}  // namespace mooncake::testing
