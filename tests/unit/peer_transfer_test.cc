// ThriftPeerTransfer (worker/peer_transfer.h) against a real master and a
// target that speaks the worker's Thrift service: once the master names the
// target, the target is told so (AdoptConfirm) off the hand-over's path.

#include "worker/peer_transfer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "master/master_config.h"
#include "master/master_handler.h"
#include "master/master_server.h"
#include "master/master_service.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_server.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;

// A target whose calls of a hand-over (AdoptStart, PutChunk, AdoptEnd) all
// answer OK; OnAdoptStart sees each key first.
class AcceptingTarget : public rpc::WorkerServiceNull {
 public:
  void AdoptStart(rpc::PutStartResult& result, const std::string& key, const int64_t /*size*/,
                  const rpc::ReplicateConfig& /*config*/, const int64_t /*version*/,
                  const std::string& /*sender*/) override {
    OnAdoptStart(key);
    result.code = rpc::ErrorCode::OK;
    result.handle = 1;
  }
  rpc::ErrorCode::type PutChunk(const int64_t /*handle*/, const int64_t /*offset*/,
                                const std::string& /*data*/) override {
    return rpc::ErrorCode::OK;
  }
  rpc::ErrorCode::type AdoptEnd(const int64_t /*handle*/, const bool /*written*/) override {
    return rpc::ErrorCode::OK;
  }

 protected:
  virtual void OnAdoptStart(const std::string& /*key*/) {}
};

// A target that takes every adopt and holds each AdoptConfirm until
// Release(), as a node that went away right after the swap would.
class HoldingTarget : public AcceptingTarget {
 public:
  rpc::ErrorCode::type AdoptConfirm(const std::string& key) override {
    std::unique_lock lock(mu_);
    confirmed_.push_back(key);
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
    return rpc::ErrorCode::OK;
  }

  // Waits (bounded) until an AdoptConfirm of `key` arrived.
  bool ConfirmArrives(const std::string& key) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s,
                        [&] { return std::ranges::find(confirmed_, key) != confirmed_.end(); });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> confirmed_;  // guarded by mu_
  bool released_ = false;               // guarded by mu_
};

// A target that takes every adopt, unless `fail_adopts` (then each
// AdoptStart throws, which its caller sees as a broken call, kRpcFail), and
// records the calls it gets.
class RecordingTarget : public AcceptingTarget {
 public:
  explicit RecordingTarget(bool fail_adopts = false) : fail_adopts_(fail_adopts) {}

  void OnAdoptStart(const std::string& key) override {
    Record("AdoptStart " + key);
    if (fail_adopts_) throw std::runtime_error("test: this node cannot take adopts");
  }
  rpc::ErrorCode::type AdoptAbort(const std::string& key) override {
    Record("AdoptAbort " + key);
    return rpc::ErrorCode::OK;
  }
  rpc::ErrorCode::type AdoptConfirm(const std::string& /*key*/) override {
    return rpc::ErrorCode::OK;
  }

  std::vector<std::string> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  void Record(std::string call) {
    std::lock_guard lock(mu_);
    calls_.push_back(std::move(call));
  }

  const bool fail_adopts_;
  std::mutex mu_;
  std::vector<std::string> calls_;  // guarded by mu_
};

// A master whose UpdateOwner of `key` goes unanswered (the caller sees a
// broken call) but is applied late: right after the next GetLocation of the
// key has been answered, as a call that waited for the master's lock past
// its caller's timeout would be.
class LateSwapMaster : public MasterHandler {
 public:
  LateSwapMaster(MasterService& service, RequestMetrics& requests, std::string key)
      : MasterHandler(service, requests), service_(service), key_(std::move(key)) {}

  rpc::ErrorCode::type UpdateOwner(const std::string& key, const std::string& expected_owner,
                                   const std::string& new_owner) override {
    if (key != key_) return MasterHandler::UpdateOwner(key, expected_owner, new_owner);
    {
      std::lock_guard lock(mu_);
      if (!late_) late_ = std::make_pair(expected_owner, new_owner);  // a retry is the same call
    }
    throw std::runtime_error("test: the answer to UpdateOwner is lost");
  }
  void GetLocation(rpc::LocationResult& result, const std::string& key) override {
    MasterHandler::GetLocation(result, key);
    std::optional<std::pair<std::string, std::string>> late;
    {
      std::lock_guard lock(mu_);
      if (key == key_) late.swap(late_);
    }
    if (late) applied_ = service_.UpdateOwner(key, late->first, late->second).has_value();
  }

  // Whether the late UpdateOwner was applied.
  bool applied() const { return applied_; }

 private:
  MasterService& service_;
  const std::string key_;
  std::mutex mu_;
  std::optional<std::pair<std::string, std::string>> late_;  // guarded by mu_
  std::atomic<bool> applied_{false};
};

NodeRecord Node(const std::string& id, int port, uint64_t free_bytes = 1ull << 30) {
  NodeRecord node;
  node.node_id = id;
  node.host = "127.0.0.1";
  node.port = port;
  node.tiers.push_back(TierUsage{"dram", "dram", free_bytes, 0, 0});
  return node;
}

ObjectSource SourceOf(const std::string& value) {
  return ObjectSource{.read = [&value](uint64_t offset, std::span<std::byte> out) -> Result<void> {
    std::memcpy(out.data(), value.data() + offset, out.size());
    return {};
  }};
}

TEST(ThriftPeerTransferTest, NeitherAHandOverNorShutdownWaitsForTheTargetToTakeItsConfirm) {
  // Given a master that knows node a, which owns "k", and node b, a target
  // that holds every AdoptConfirm.
  MasterConfig config;
  config.port = 0;  // never a default port: a local cluster may hold it
  config.admin_port = -1;
  config.node_ttl_ms = 60000;
  auto master = MasterServer::Start(config);
  ASSERT_TRUE(master);
  auto target = std::make_shared<HoldingTarget>();
  auto server = RpcServer::Start(std::make_shared<rpc::WorkerServiceProcessor>(target),
                                 RpcServerOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(server) << ToString(server.error());
  MasterService& service = (*master)->service();
  ASSERT_TRUE(service.RegisterNode(Node("a", 1)));
  ASSERT_TRUE(service.RegisterNode(Node("b", (*server)->port())));
  ASSERT_TRUE(service.PutOwner("k", "a"));
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*master)->port()});
  link.set_node_id("a");
  {
    auto peers_owner = std::make_unique<ThriftPeerTransfer>(link);
    ThriftPeerTransfer& peers = *peers_owner;
    const std::string value = "value";
    ObjectSource source{.read = [&](uint64_t offset, std::span<std::byte> out) -> Result<void> {
      std::memcpy(out.data(), value.data() + offset, out.size());
      return {};
    }};
    // When a moves "k" to b.
    auto moved = std::async(std::launch::async, [&] {
      return peers.Transfer("k", value.size(), 1, ObjectOptions{}, source, "b", false);
    });
    // Then the move returns once the master names b, while b still holds
    // the confirm it was sent.
    const bool returned = moved.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(target->ConfirmArrives("k"));
    // And this worker's shutdown gives up on a target that holds its
    // confirm within a short timeout, not the data calls' 30 s.
    auto stopped = std::async(std::launch::async, [&] {
      if (returned) peers_owner.reset();
    });
    const bool stopped_in_time = stopped.wait_for(10s) == std::future_status::ready;
    target->Release();
    ASSERT_TRUE(returned) << "the hand-over waited for the target's AdoptConfirm";
    EXPECT_TRUE(stopped_in_time) << "shutdown waited for the target's AdoptConfirm";
    stopped.wait();
    auto to = moved.get();
    ASSERT_TRUE(to) << ToString(to.error());
    EXPECT_EQ(*to, "b");
    EXPECT_EQ(service.GetLocation("k")->node_id, "b");
  }
  (*server)->Stop();
}

// The master answers "a" to who owns "k" while a's timed-out UpdateOwner to
// b is still to be applied, and applies it just after. An AdoptAbort sent
// on that answer would erase b's copy, and a, once it learns b owns the key,
// its own: the key would have no copy anywhere.
TEST(ThriftPeerTransferTest, AHandOverWhoseAnswerIsLostDoesNotAbortTheTargetsCopy) {
  MasterService service;
  RequestMetrics requests(MasterHandler::OperationNames());
  auto handler = std::make_shared<LateSwapMaster>(service, requests, "k");
  auto master = RpcServer::Start(std::make_shared<rpc::MasterServiceProcessor>(handler),
                                 RpcServerOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(master) << ToString(master.error());
  auto target = std::make_shared<RecordingTarget>();
  auto server = RpcServer::Start(std::make_shared<rpc::WorkerServiceProcessor>(target),
                                 RpcServerOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(server) << ToString(server.error());
  ASSERT_TRUE(service.RegisterNode(Node("a", 1)));
  ASSERT_TRUE(service.RegisterNode(Node("b", (*server)->port())));
  ASSERT_TRUE(service.PutOwner("k", "a"));
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*master)->port()});
  link.set_node_id("a");
  {
    ThriftPeerTransfer peers(link);
    const std::string value = "value";
    auto moved = peers.Transfer("k", value.size(), 1, ObjectOptions{}, SourceOf(value), "b", false);
    // The outcome is not known yet: a keeps its copy and asks again later.
    ASSERT_FALSE(moved);
    EXPECT_EQ(moved.error(), ErrorCode::kRpcTimeout);
  }
  ASSERT_TRUE(handler->applied());
  EXPECT_EQ(service.GetLocation("k")->node_id, "b");
  // b keeps the copy the master now names it for.
  EXPECT_EQ(target->calls(), (std::vector<std::string>{"AdoptStart k"}));
  (*master)->Stop();
  (*server)->Stop();
}

// b is alive to the master and has the most room, so the master names it
// for every move, but no adopt reaches it. Each move goes to c instead, and
// only the first waits for b to fail.
TEST(ThriftPeerTransferTest, MovesGoPastANodeThatCannotTakeThem) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = -1;
  config.node_ttl_ms = 60000;
  config.rebuild_ms = 0;  // no workers to wait for
  auto master = MasterServer::Start(config);
  ASSERT_TRUE(master);
  auto failing = std::make_shared<RecordingTarget>(/*fail_adopts=*/true);
  auto b = RpcServer::Start(std::make_shared<rpc::WorkerServiceProcessor>(failing),
                            RpcServerOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(b) << ToString(b.error());
  auto taking = std::make_shared<RecordingTarget>();
  auto c = RpcServer::Start(std::make_shared<rpc::WorkerServiceProcessor>(taking),
                            RpcServerOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(c) << ToString(c.error());
  MasterService& service = (*master)->service();
  ASSERT_TRUE(service.RegisterNode(Node("a", 1)));
  ASSERT_TRUE(service.RegisterNode(Node("b", (*b)->port(), 1ull << 30)));
  ASSERT_TRUE(service.RegisterNode(Node("c", (*c)->port(), 1ull << 20)));
  ASSERT_TRUE(service.PutOwner("k1", "a"));
  ASSERT_TRUE(service.PutOwner("k2", "a"));
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*master)->port()});
  link.set_node_id("a");
  {
    ThriftPeerTransfer peers(link);
    peers.set_unreachable_memory(Millis(3600 * 1000));  // the test's pace does not matter
    const std::string value = "value";
    for (const std::string key : {"k1", "k2"}) {
      auto moved =
          peers.Transfer(key, value.size(), 1, ObjectOptions{}, SourceOf(value), "", false);
      ASSERT_TRUE(moved) << key << ": " << ToString(moved.error());
      EXPECT_EQ(*moved, "c") << key;
      EXPECT_EQ(service.GetLocation(key)->node_id, "c") << key;
    }
  }
  EXPECT_EQ(failing->calls(), (std::vector<std::string>{"AdoptStart k1"}));
  (*b)->Stop();
  (*c)->Stop();
}

}  // namespace
}  // namespace mooncake
