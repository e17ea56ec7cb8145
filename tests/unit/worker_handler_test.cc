// WorkerHandler: the Thrift face of a worker, over a real backend.

#include "worker/worker_handler.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "tests/raw_rpc.h"
#include "tests/unit/in_memory_directory.h"
#include "thrift/rpc_server.h"
#include "tiers/dram_tier.h"
#include "worker/worker_processor.h"

namespace mooncake {
namespace {

using mooncake::testing::InMemoryDirectory;
using mooncake::testing::RawConnection;
using mooncake::testing::Wire;
using namespace std::chrono_literals;

class WorkerHandlerTest : public ::testing::Test {
 protected:
  WorkerHandlerTest()
      : requests_(WorkerHandler::OperationNames()),
        backend_(MakeTiers(), &directory_, {}),
        handler_(backend_, "w1", requests_) {}

  static std::vector<std::unique_ptr<CacheTier>> MakeTiers() {
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 4 << 20).value()));
    tiers.push_back(std::move(DramTier::Create("dram2", 16 << 20).value()));
    return tiers;
  }

  // The worker's processor over handler_ on the epoll engine, as
  // WorkerServer serves it.
  std::unique_ptr<RpcServer> ServeOnEpoll() {
    auto processor = std::make_shared<WorkerProcessor>(
        std::shared_ptr<WorkerHandler>(std::shared_ptr<WorkerHandler>{}, &handler_));
    RpcServerOptions options{.host = "127.0.0.1", .port = 0};
    options.limits.engine = RpcEngine::kEpoll;
    options.may_block = &WorkerProcessor::MayBlock;
    auto started = RpcServer::Start(processor, options);
    EXPECT_TRUE(started);
    return started ? std::move(*started) : nullptr;
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

// A Put call of `value` under `key` as a client sends it (no config: the
// defaults).
std::string PutCall(const std::string& key, const std::string& value, uint32_t seqid) {
  return Wire()
      .Call("Put", seqid)
      .Field(testing::kString, 1)
      .Str(key)
      .Field(testing::kString, 2)
      .Str(value)
      .Stop()
      .Framed();
}

// The code a Put reply frame carries, with its seqid; nullopt for anything
// else.
std::optional<std::pair<rpc::ErrorCode::type, int32_t>> DecodePutReply(const std::string& frame) {
  using apache::thrift::protocol::TBinaryProtocol;
  using apache::thrift::transport::TMemoryBuffer;
  auto buffer =
      std::make_shared<TMemoryBuffer>(reinterpret_cast<uint8_t*>(const_cast<char*>(frame.data())),
                                      static_cast<uint32_t>(frame.size()));
  TBinaryProtocol protocol(buffer);
  std::string name;
  apache::thrift::protocol::TMessageType type;
  int32_t seqid = 0;
  rpc::ErrorCode::type code{};
  rpc::WorkerService_Put_presult result;
  result.success = &code;
  try {
    protocol.readMessageBegin(name, type, seqid);
    result.read(&protocol);
    protocol.readMessageEnd();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (name != "Put" || type != apache::thrift::protocol::T_REPLY || !result.__isset.success) {
    return std::nullopt;
  }
  return std::make_pair(code, seqid);
}

// On the epoll engine a Put's reply waits for its claim, not a thread: it
// comes when the master answers, and the connection answers nothing else
// meanwhile; a put that might wait (here: no room in the first tier without
// eviction) is answered the blocking way, claim and all, before its reply.
TEST_F(WorkerHandlerTest, OnTheEpollEngineAPutIsAnsweredWhenItsClaimReturns) {
  directory_.HoldAsyncClaims();
  auto server = ServeOnEpoll();
  ASSERT_NE(server, nullptr);
  RawConnection conn(server->port());
  ASSERT_TRUE(conn.Send(PutCall("k", "value", 41)));
  // Its claim is held (on the wire): no reply yet.
  for (int i = 0; i < 200 && directory_.held_claims() == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(directory_.held_claims(), 1u);
  EXPECT_FALSE(conn.Readable(100ms));
  EXPECT_FALSE(directory_.Owns("k"));

  directory_.RunHeldClaims();
  auto reply = conn.ReadFrame();
  ASSERT_TRUE(reply) << "no reply once the claim returned";
  auto decoded = DecodePutReply(*reply);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->first, rpc::ErrorCode::OK);
  EXPECT_EQ(decoded->second, 41);
  EXPECT_TRUE(directory_.Owns("k"));
  EXPECT_FALSE(conn.Readable(50ms));  // exactly one reply

  // A second put of the key is refused at once, without a claim.
  ASSERT_TRUE(conn.Send(PutCall("k", "again", 42)));
  reply = conn.ReadFrame();
  ASSERT_TRUE(reply);
  decoded = DecodePutReply(*reply);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->first, rpc::ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(directory_.held_claims(), 0u);

  // 3 MiB fits the first tier (4 MiB) only once: the second needs room made.
  const std::string big(3 << 20, 'b');
  ASSERT_TRUE(conn.Send(PutCall("big1", big, 43)));
  for (int i = 0; i < 200 && directory_.held_claims() == 0; ++i) std::this_thread::sleep_for(5ms);
  directory_.RunHeldClaims();
  reply = conn.ReadFrame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(DecodePutReply(*reply)->first, rpc::ErrorCode::OK);
  ASSERT_TRUE(conn.Send(PutCall("big2", big, 44)));
  reply = conn.ReadFrame();  // no claim held: it went the blocking way
  ASSERT_TRUE(reply) << "a put that needed eviction was not answered";
  decoded = DecodePutReply(*reply);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->first, rpc::ErrorCode::OK);
  EXPECT_EQ(decoded->second, 44);
  EXPECT_EQ(directory_.held_claims(), 0u);
  EXPECT_TRUE(directory_.Owns("big2"));
}

// A put whose reply waits for its claim still counts as a put, once, with
// its outcome.
TEST_F(WorkerHandlerTest, AsyncPutsAreCountedOnceWithTheirCode) {
  auto server = ServeOnEpoll();
  ASSERT_NE(server, nullptr);
  directory_.ClaimElsewhere("taken");
  RawConnection conn(server->port());
  ASSERT_TRUE(conn.Send(PutCall("mine", "v", 1)));
  ASSERT_TRUE(conn.ReadFrame());
  ASSERT_TRUE(conn.Send(PutCall("taken", "v", 2)));
  auto reply = conn.ReadFrame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(DecodePutReply(*reply)->first, rpc::ErrorCode::OBJECT_ALREADY_EXISTS);
  uint64_t puts = 0, put_errors = 0;
  for (const auto& op : requests_.Snapshot()) {
    if (op.op == "put") {
      puts = op.requests;
      put_errors = op.errors;
    }
  }
  EXPECT_EQ(puts, 2u);
  EXPECT_EQ(put_errors, 1u);
}

// A placed put holds its object's space from the frame's header on, before
// its value: the bytes so held are bounded, and past the bound a value is
// read into the frame, as a value the client has sent, and stored the same.
TEST_F(WorkerHandlerTest, PlacedPutsHoldNoMoreSpaceThanTheirBudget) {
  handler_.set_placed_bytes_limit(1 << 20);
  const uint64_t used_before = backend_.Stats().tiers[0].used;
  auto first = handler_.StartPlacedPut("first", 768 << 10, {});
  ASSERT_TRUE(first);
  EXPECT_EQ(handler_.placed_bytes_in_flight(), 768u << 10);
  EXPECT_GE(backend_.Stats().tiers[0].used, used_before + (768 << 10));
  // Over the budget: nothing reserved, no key taken.
  EXPECT_FALSE(handler_.StartPlacedPut("second", 512 << 10, {}));
  EXPECT_EQ(handler_.placed_bytes_in_flight(), 768u << 10);
  EXPECT_EQ(backend_.Inspect("second").error(), ErrorCode::kObjectNotFound);
  // A revoked put (its value never all came) gives its share back.
  first.reset();
  EXPECT_EQ(handler_.placed_bytes_in_flight(), 0u);
  auto second = handler_.StartPlacedPut("second", 512 << 10, {});
  ASSERT_TRUE(second);
  std::memset(second->bytes().data(), 's', second->bytes().size());
  EXPECT_EQ(second->Finish(), rpc::ErrorCode::OK);
  second.reset();
  EXPECT_EQ(handler_.placed_bytes_in_flight(), 0u);
}

TEST_F(WorkerHandlerTest, APutOverThePlacedBudgetIsStoredFromTheFrame) {
  handler_.set_placed_bytes_limit(0);
  handler_.set_serving_reads(true);
  auto server = ServeOnEpoll();
  ASSERT_NE(server, nullptr);
  RawConnection conn(server->port());
  const std::string value(2 << 20, 'v');
  ASSERT_TRUE(conn.Send(PutCall("framed", value, 7)));
  auto reply = conn.ReadFrame();
  ASSERT_TRUE(reply);
  auto decoded = DecodePutReply(*reply);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->first, rpc::ErrorCode::OK);
  rpc::GetResult read;
  handler_.Get(read, "framed", 0, 0);
  EXPECT_EQ(read.code, rpc::ErrorCode::OK);
  EXPECT_EQ(read.data, value);
}

}  // namespace
}  // namespace mooncake
