// RpcPipeline (thrift/rpc_pipeline.h) against in-process servers of both
// engines: many calls in flight on one connection, each completed with its
// own reply in request order; completions that issue calls; and the ways a
// connection breaks (the server hangs up with calls out, a reply that does
// not come in time, a connection the server closed while idle).
//
// Every wait is bounded; servers listen on port 0.

#include "thrift/rpc_pipeline.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_server.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;
using Pipeline = RpcPipeline<rpc::MasterServiceClient>;

// Answers AnnounceKeys with the keys it was sent; ListNodes waits until
// released, so a test can hold replies back.
class EchoMaster : public rpc::MasterServiceNull {
 public:
  void AnnounceKeys(rpc::AnnounceResult& result, const std::string& /*node_id*/,
                    const std::vector<std::string>& keys) override {
    result.code = rpc::ErrorCode::OK;
    result.rejected = keys;
  }
  void ListNodes(std::vector<rpc::NodeInfo>& /*nodes*/) override {
    std::unique_lock lock(mu_);
    released_.wait_for(lock, 10s, [&] { return release_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    release_ = true;
    released_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  bool release_ = false;
};

// Results of calls completing on the reader thread, in completion order.
template <typename T>
class Completions {
 public:
  void Add(Result<T> result) {
    std::lock_guard lock(mu_);
    results_.push_back(std::move(result));
    added_.notify_all();
  }
  // Waits (at most `timeout`) for `count` completions and returns them all.
  std::vector<Result<T>> Await(size_t count, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mu_);
    added_.wait_for(lock, timeout, [&] { return results_.size() >= count; });
    return results_;
  }

 private:
  std::mutex mu_;
  std::condition_variable added_;
  std::vector<Result<T>> results_;
};

std::unique_ptr<RpcServer> StartServer(std::shared_ptr<EchoMaster> master, RpcEngine engine,
                                       RpcServerLimits limits = {}) {
  limits.engine = engine;
  RpcServerOptions options{.host = "127.0.0.1", .port = 0, .limits = limits};
  // On the epoll engine, only ListNodes (which waits) goes to the pool.
  options.may_block = [](std::string_view method) { return method == "ListNodes"; };
  auto processor = std::make_shared<rpc::MasterServiceProcessor>(std::move(master));
  auto started = RpcServer::Start(processor, options);
  EXPECT_TRUE(started) << ToString(started.error());
  return started ? std::move(*started) : nullptr;
}

std::unique_ptr<Pipeline> OpenPipeline(int port, int io_timeout_ms = 5000) {
  auto opened = Pipeline::Open("127.0.0.1", port, RpcOptions{.io_timeout_ms = io_timeout_ms});
  EXPECT_TRUE(opened) << ToString(opened.error());
  return opened ? std::move(*opened) : nullptr;
}

// Sends AnnounceKeys({key}); the completion adds the echoed key.
bool SendEcho(Pipeline& pipeline, const std::string& key, Completions<std::string>& done) {
  return pipeline.Call<rpc::AnnounceResult>(
      [&](rpc::MasterServiceClient& c) { c.send_AnnounceKeys("node", {key}); },
      [](rpc::MasterServiceClient& c, rpc::AnnounceResult& r) { c.recv_AnnounceKeys(r); },
      [&done](Result<rpc::AnnounceResult> reply) {
        if (!reply) return done.Add(Err(reply.error()));
        if (reply->rejected.size() != 1) return done.Add(Err(ErrorCode::kInternalError));
        done.Add(reply->rejected[0]);
      });
}

// Sends ListNodes, which EchoMaster holds until released.
bool SendHeld(Pipeline& pipeline, Completions<bool>& done) {
  return pipeline.Call<std::vector<rpc::NodeInfo>>(
      [](rpc::MasterServiceClient& c) { c.send_ListNodes(); },
      [](rpc::MasterServiceClient& c, std::vector<rpc::NodeInfo>& r) { c.recv_ListNodes(r); },
      [&done](Result<std::vector<rpc::NodeInfo>> reply) {
        done.Add(reply ? Result<bool>(true) : Err(reply.error()));
      });
}

class RpcPipelineTest : public ::testing::TestWithParam<RpcEngine> {
 protected:
  // An EchoMaster server on this test's engine and a pipeline to it.
  void Start(RpcServerLimits limits = {}, int io_timeout_ms = 5000) {
    server_ = StartServer(master_, GetParam(), limits);
    ASSERT_NE(server_, nullptr);
    pipeline_ = OpenPipeline(server_->port(), io_timeout_ms);
    ASSERT_NE(pipeline_, nullptr);
  }

  std::shared_ptr<EchoMaster> master_ = std::make_shared<EchoMaster>();
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<Pipeline> pipeline_;
};

INSTANTIATE_TEST_SUITE_P(Engines, RpcPipelineTest,
                         ::testing::Values(RpcEngine::kThreads, RpcEngine::kEpoll),
                         [](const auto& info) {
                           return info.param == RpcEngine::kThreads ? "Threads" : "Epoll";
                         });

TEST_P(RpcPipelineTest, ManyCallsInFlightCompleteInOrderEachWithItsOwnReply) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto& pipeline = pipeline_;

  // All written before any is read: the reader thread finds many replies
  // in one read and must hand each to its own call.
  constexpr int kCalls = 500;
  Completions<std::string> done;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(SendEcho(*pipeline, "key-" + std::to_string(i), done)) << "call " << i;
  }
  auto results = done.Await(kCalls);
  ASSERT_EQ(results.size(), kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(results[i]) << "call " << i << ": " << ToString(results[i].error());
    EXPECT_EQ(*results[i], "key-" + std::to_string(i)) << "completion " << i;
  }
  EXPECT_FALSE(pipeline->broken());
}

TEST_P(RpcPipelineTest, CallsFromManyThreadsAndFromCompletionsAllComplete) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto& pipeline = pipeline_;

  // Four threads each start a chain: every completion sends the chain's
  // next call until it has made kLength.
  constexpr int kChains = 4;
  constexpr int kLength = 100;
  Completions<std::string> done;
  struct Chain {
    Pipeline* pipeline;
    Completions<std::string>* done;
    std::string name;
    int sent = 0;
    void Next() {
      std::string key = name + "-" + std::to_string(sent++);
      pipeline->Call<rpc::AnnounceResult>(
          [&](rpc::MasterServiceClient& c) { c.send_AnnounceKeys("node", {key}); },
          [](rpc::MasterServiceClient& c, rpc::AnnounceResult& r) { c.recv_AnnounceKeys(r); },
          [this, key](Result<rpc::AnnounceResult> reply) {
            bool echoed = reply && reply->rejected.size() == 1 && reply->rejected[0] == key;
            // Read before the last Add lets the test end and free this chain.
            const bool more = sent < kLength;
            done->Add(echoed ? Result<std::string>(key) : Err(ErrorCode::kInternalError));
            if (more) Next();
          });
    }
  };
  std::vector<Chain> chains;
  for (int c = 0; c < kChains; ++c)
    chains.push_back({pipeline.get(), &done, "c" + std::to_string(c)});
  std::vector<std::thread> starters;
  for (auto& chain : chains) starters.emplace_back([&chain] { chain.Next(); });
  for (auto& thread : starters) thread.join();

  auto results = done.Await(kChains * kLength);
  ASSERT_EQ(results.size(), kChains * kLength);
  for (const auto& result : results) EXPECT_TRUE(result) << ToString(result.error());
}

TEST_P(RpcPipelineTest, AReplyThatDoesNotComeInTimeFailsEveryCallOutAndBreaksTheConnection) {
  ASSERT_NO_FATAL_FAILURE(Start({}, /*io_timeout_ms=*/300));
  struct ReleaseOnExit {
    EchoMaster& master;
    ~ReleaseOnExit() { master.Release(); }
  } release_on_exit{*master_};
  auto& pipeline = pipeline_;

  Completions<bool> held;
  Completions<std::string> behind;
  ASSERT_TRUE(SendHeld(*pipeline, held));
  ASSERT_TRUE(SendEcho(*pipeline, "behind", behind));
  auto first = held.Await(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0]);
  if (!first[0]) {
    EXPECT_EQ(first[0].error(), ErrorCode::kRpcTimeout);
  }
  // The call behind it cannot be read in step any more: it fails too.
  auto second = behind.Await(1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_FALSE(second[0]);
  EXPECT_TRUE(pipeline->broken());
  // And the pipeline takes no new call (its completion is never run).
  Completions<std::string> refused;
  EXPECT_FALSE(SendEcho(*pipeline, "after", refused));
}

TEST_P(RpcPipelineTest, AConnectionTheServerClosedWhileIdleIsRefusedBeforeSending) {
  ASSERT_NO_FATAL_FAILURE(Start({.idle_timeout_ms = 200}));
  auto& pipeline = pipeline_;
  auto& server = server_;
  Completions<std::string> done;
  ASSERT_TRUE(SendEcho(*pipeline, "first", done));
  ASSERT_EQ(done.Await(1).size(), 1u);

  // Wait for the server's idle close.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server->stats().fault_count(RpcFault::kIdleTimeout) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(server->stats().fault_count(RpcFault::kIdleTimeout), 1u);
  // Refused, not sent into a closed connection to fail later.
  EXPECT_FALSE(SendEcho(*pipeline, "second", done));
  EXPECT_TRUE(pipeline->broken());
  EXPECT_EQ(done.Await(2, 200ms).size(), 1u) << "a refused call was completed";
}

// A server that accepts one connection, reads a few bytes and closes it:
// the calls already written lose their connection.
TEST(RpcPipelineFailureTest, AServerThatHangsUpFailsEveryCallOutOnce) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);

  auto pipeline = OpenPipeline(port);
  ASSERT_NE(pipeline, nullptr);
  constexpr int kCalls = 5;
  Completions<std::string> done;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(SendEcho(*pipeline, std::to_string(i), done));

  // Only now does the server take the connection, read a little, and hang up.
  int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  char some[16];
  ASSERT_GT(recv(conn, some, sizeof(some), 0), 0);
  close(conn);
  close(listener);

  auto results = done.Await(kCalls);
  ASSERT_EQ(results.size(), kCalls);
  for (const auto& result : results) {
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error(), ErrorCode::kRpcFail);
  }
  EXPECT_TRUE(pipeline->broken());
  pipeline.reset();
  EXPECT_EQ(done.Await(kCalls + 1, 200ms).size(), kCalls) << "a call completed twice";
}

TEST(RpcPipelineFailureTest, OpeningToAPortNobodyListensOnFails) {
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  // Bound, never listening: a connect is refused.
  auto opened = Pipeline::Open("127.0.0.1", ntohs(address.sin_port), RpcOptions{});
  close(probe);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error(), ErrorCode::kRpcFail);
}

}  // namespace
}  // namespace mooncake
