// The bounded wire layer without processes: an in-process RpcServer (the
// generated MasterService processor over a do-nothing handler) driven through
// raw loopback sockets, an RpcChannel against a fake server whose replies
// break the limits, and the checks of the RPC flags.
//
// Every wait is bounded; servers listen on port 0.

#include "thrift/rpc_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mooncake_rpc/MasterService.h"
#include "mooncake_rpc/WorkerService.h"
#include "tests/raw_rpc.h"
#include "thrift/rpc_call_site.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_server.h"
#include "thrift/rpc_settings.h"
#include "thrift/value_calls.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using apache::thrift::protocol::T_I32;
using apache::thrift::protocol::T_LIST;
using apache::thrift::protocol::T_MAP;
using apache::thrift::protocol::T_STRING;
using apache::thrift::protocol::T_STRUCT;

using testing::Frame;
using testing::kReplyHeader;
using testing::RawConnection;
using testing::ReadI32;
using testing::Wire;

constexpr int64_t kMiB = 1 << 20;

// A valid ListNodes call: the smallest request the master answers.
std::string ListNodesCall() { return Wire().Call("ListNodes").Stop().Framed(); }

// A ListNodes call whose args carry an unknown field of `depth` nested
// structs (skipped by the server, but counted against kRpcMaxDepth).
std::string ListNodesWithNestedStructs(int depth) {
  Wire w;
  w.Call("ListNodes");
  for (int i = 0; i < depth; ++i) w.Field(T_STRUCT, 99);
  for (int i = 0; i < depth; ++i) w.Stop();
  return w.Stop().Framed();
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Peak resident memory of this process, in KiB (0 if unknown).
int64_t PeakRssKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6));
  }
  return 0;
}

// Resets the peak to the current RSS, so that a later PeakRssKiB() shows
// what happened since (best effort: without it the check is only weaker).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The replies to pipelined calls on one connection, which arrive several to
// a read.
class ReplyReader {
 public:
  explicit ReplyReader(RawConnection& conn) : conn_(conn) {}

  // The next reply's payload, or nullopt if it does not arrive whole in 5 s.
  std::optional<std::string> Next() {
    auto whole = [&] {
      return stream_.size() >= at_ + 4 && stream_.size() >= at_ + 4 + ReadI32(stream_, at_);
    };
    while (!whole()) {
      if (conn_.Await(5s, &stream_) != RawConnection::Outcome::kAnswered) return std::nullopt;
    }
    auto length = static_cast<size_t>(ReadI32(stream_, at_));
    std::string payload = stream_.substr(at_ + 4, length);
    at_ += 4 + length;
    return payload;
  }

 private:
  RawConnection& conn_;
  std::string stream_;
  size_t at_ = 0;
};

// The method name and sequence id of a reply frame's payload.
std::pair<std::string, int32_t> ReplyNameAndSeqId(const std::string& payload) {
  auto length = static_cast<size_t>(ReadI32(payload, 4));
  return {payload.substr(8, length), ReadI32(payload, 8 + length)};
}

// How a server test's RpcServer serves: the engine and, for epoll, which
// threads answer.
enum class Serving {
  kThreads,    // --rpc-engine threads
  kEpollPool,  // epoll, every call may block: the loop hands each to the pool
  kEpollLoop,  // epoll, no call blocks: the loop threads answer them all
};

// An RpcServer with the real MasterService processor over a handler that
// answers everything with defaults.
// Every server test runs on each way of serving.
class RpcServerTest : public ::testing::TestWithParam<Serving> {
 protected:
  void StartServer(RpcServerLimits limits = {}, std::shared_ptr<rpc::MasterServiceIf> handler =
                                                    std::make_shared<rpc::MasterServiceNull>()) {
    auto processor = std::make_shared<rpc::MasterServiceProcessor>(std::move(handler));
    limits.engine = GetParam() == Serving::kThreads ? RpcEngine::kThreads : RpcEngine::kEpoll;
    RpcServerOptions options{.host = "127.0.0.1", .port = 0, .limits = limits};
    if (GetParam() == Serving::kEpollLoop) {
      options.may_block = may_block_ ? may_block_ : [](std::string_view) { return false; };
    }
    auto started = RpcServer::Start(processor, options);
    ASSERT_TRUE(started) << ToString(started.error());
    server_ = std::move(*started);
    ASSERT_GT(server_->port(), 0);
  }

  uint64_t Faults(RpcFault fault) const { return server_->stats().fault_count(fault); }

  // Expects the server to close `conn` (no answer) within `timeout` and to
  // count exactly one `fault`.
  void ExpectClosedFor(RawConnection& conn, RpcFault fault,
                       std::chrono::milliseconds timeout = 3s) {
    std::string got;
    EXPECT_EQ(conn.Await(timeout, &got), RawConnection::Outcome::kClosed)
        << "got " << got.size() << " bytes instead of a close";
    EXPECT_TRUE(Eventually([&] { return Faults(fault) == 1; }))
        << RpcFaultName(fault) << " counted " << Faults(fault);
  }

  // Expects `frame` on a fresh connection to be closed for kSizeLimit
  // before the server allocates what it declares: the peak RSS of this
  // process (the server's) grows by less than 64 MiB meanwhile.
  void ExpectRefusedWithoutAllocating(const std::string& frame) {
    RawConnection conn(server_->port());
    ResetPeakRss();
    const int64_t peak_before = PeakRssKiB();
    ASSERT_TRUE(conn.Send(frame));
    ExpectClosedFor(conn, RpcFault::kSizeLimit);
    EXPECT_LT(PeakRssKiB() - peak_before, 64 * 1024) << "KiB of peak RSS grew";
  }

  std::unique_ptr<RpcServer> server_;
  // For kEpollLoop: the calls that may block (none when null).
  std::function<bool(std::string_view)> may_block_;
};

TEST_P(RpcServerTest, AnswersAValidCallOnARawSocketAndThroughRpcChannel) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.connected());
  EXPECT_TRUE(conn.RoundTrip());
  EXPECT_TRUE(conn.RoundTrip());  // the connection stays open between frames

  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", server_->port());
  auto nodes = channel.Call([](auto& c) {
    std::vector<rpc::NodeInfo> r;
    c.ListNodes(r);
    return r;
  });
  ASSERT_TRUE(nodes) << ToString(nodes.error());
  EXPECT_TRUE(nodes->empty());
  auto stats = server_->stats();
  EXPECT_EQ(stats.accepted_connections, 2u);
  EXPECT_EQ(std::accumulate(stats.faults.begin(), stats.faults.end(), uint64_t{0}), 0u);
}

TEST_P(RpcServerTest, FrameOverTheLimitIsRefusedBeforeItsPayload) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.Send(Frame("", kRpcMaxFrameBytes + 1)));
  ExpectClosedFor(conn, RpcFault::kFrameTooLarge);

  // A negative size (2 GiB and up as unsigned) too.
  RawConnection negative(server_->port());
  ASSERT_TRUE(negative.Send(Frame("", 0x80000000u)));
  EXPECT_EQ(negative.Await(3s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(Eventually([&] { return Faults(RpcFault::kFrameTooLarge) == 2; }));
}

TEST_P(RpcServerTest, FrameOfExactlyTheLimitIsRead) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // A ListNodes call padded with an unknown string field up to 16 MiB.
  Wire w;
  w.Call("ListNodes").Field(T_STRING, 7);
  const size_t head = w.Framed().size() - 4 + 4 /*string length*/ + 1 /*stop*/;
  w.Str(std::string(kRpcMaxFrameBytes - head, 'x')).Stop();
  std::string frame = w.Framed();
  ASSERT_EQ(frame.size(), kRpcMaxFrameBytes + 4);
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.Send(frame));
  auto reply = conn.ReadFrame(10s);
  ASSERT_TRUE(reply);
  EXPECT_EQ(ReadI32(*reply, 0), kReplyHeader);
}

TEST_P(RpcServerTest, StringLargerThanItsFrameIsRefusedWithoutAllocating) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // GetLocation(key) whose key declares 0x7FFFFFF0 bytes in a 40-byte frame.
  ExpectRefusedWithoutAllocating(
      Wire().Call("GetLocation").Field(T_STRING, 1).I32(0x7FFFFFF0).Raw("abc").Framed());
}

TEST_P(RpcServerTest, ListLargerThanItsFrameIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // BatchGetLocation(keys) declaring 0x7FFFFFF0 strings (4 bytes each at least).
  ExpectRefusedWithoutAllocating(Wire()
                                     .Call("BatchGetLocation")
                                     .Field(T_LIST, 1)
                                     .U8(T_STRING)
                                     .I32(0x7FFFFFF0)
                                     .Str("k")
                                     .Framed());
}

TEST_P(RpcServerTest, MapInAnUnknownFieldIsCheckedToo) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawConnection conn(server_->port());
  // 100 i32 -> i32 pairs need 800 bytes; the frame has a dozen.
  std::string frame =
      Wire().Call("ListNodes").Field(T_MAP, 5).U8(T_I32).U8(T_I32).I32(100).I32(1).I32(2).Framed();
  ASSERT_TRUE(conn.Send(frame));
  ExpectClosedFor(conn, RpcFault::kSizeLimit);
}

TEST_P(RpcServerTest, ContainersAreCappedInElementsEvenWhenTheFrameHoldsThem) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // `count` one-byte bools in an unknown list field: all present in the frame.
  auto bools = [](int32_t count) {
    return Wire()
        .Call("ListNodes")
        .Field(T_LIST, 5)
        .U8(apache::thrift::protocol::T_BOOL)
        .I32(count)
        .Raw(std::string(static_cast<size_t>(count), '\1'))
        .Stop()
        .Framed();
  };
  RawConnection at_cap(server_->port());
  ASSERT_TRUE(at_cap.Send(bools(static_cast<int32_t>(kRpcMaxContainerElements))));
  auto reply = at_cap.ReadFrame();
  ASSERT_TRUE(reply) << kRpcMaxContainerElements << " elements were refused";
  EXPECT_EQ(ReadI32(*reply, 0), kReplyHeader);

  RawConnection over(server_->port());
  ASSERT_TRUE(over.Send(bools(static_cast<int32_t>(kRpcMaxContainerElements) + 1)));
  ExpectClosedFor(over, RpcFault::kSizeLimit);
}

TEST_P(RpcServerTest, NestingBeyondTheDepthLimitIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // The args struct is level 1: 15 nested unknown structs reach 16, allowed.
  RawConnection ok(server_->port());
  ASSERT_TRUE(ok.Send(ListNodesWithNestedStructs(kRpcMaxDepth - 1)));
  auto reply = ok.ReadFrame();
  ASSERT_TRUE(reply) << "a request nested " << kRpcMaxDepth << " deep was not answered";
  EXPECT_EQ(ReadI32(*reply, 0), kReplyHeader);

  RawConnection deep(server_->port());
  ASSERT_TRUE(deep.Send(ListNodesWithNestedStructs(kRpcMaxDepth)));
  ExpectClosedFor(deep, RpcFault::kDepthLimit);
}

TEST_P(RpcServerTest, UnversionedMessageIsMalformed) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawConnection conn(server_->port());
  // The old non-strict form: method name first, no version word.
  std::string frame = Wire().Str("ListNodes").U8(1).I32(1).Stop().Framed();
  ASSERT_TRUE(conn.Send(frame));
  ExpectClosedFor(conn, RpcFault::kMalformed);
}

TEST_P(RpcServerTest, PeerClosingInsideAFrameIsTruncated) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  {
    RawConnection conn(server_->port());
    ASSERT_TRUE(conn.Send(Frame("only ten b", 100)));
  }
  EXPECT_TRUE(Eventually([&] { return Faults(RpcFault::kTruncatedFrame) == 1; }));
}

TEST_P(RpcServerTest, FrameThatDribblesIsClosedAtTheReadTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer({.read_timeout_ms = 300}));
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.Send(Frame("", 1000)));
  // One byte every 50 ms would take 50 s; the server must give up after 300 ms.
  const auto start = Clock::now();
  bool closed = false;
  for (int i = 0; i < 1000 && Clock::now() - start < 5s && !closed; ++i) {
    closed = !conn.Send("x") || conn.Await(50ms) == RawConnection::Outcome::kClosed;
  }
  EXPECT_TRUE(closed) << "still open after " << (Clock::now() - start) / 1ms << " ms";
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_TRUE(Eventually([&] { return Faults(RpcFault::kSlowFrame) == 1; }));
}

TEST_P(RpcServerTest, SilentConnectionIsClosedAtTheIdleTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer({.idle_timeout_ms = 200}));
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.RoundTrip());  // idle counts from the last frame too
  const auto start = Clock::now();
  EXPECT_EQ(conn.Await(3s), RawConnection::Outcome::kClosed);
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_TRUE(Eventually([&] { return Faults(RpcFault::kIdleTimeout) == 1; }));
  // Idle closes are housekeeping, not rejected frames.
  EXPECT_EQ(Faults(RpcFault::kSlowFrame), 0u);
}

TEST_P(RpcServerTest, ConnectionsOverTheLimitAreClosedWhileOthersKeepWorking) {
  ASSERT_NO_FATAL_FAILURE(StartServer({.max_connections = 2}));
  RawConnection first(server_->port());
  RawConnection second(server_->port());
  ASSERT_TRUE(first.RoundTrip());
  ASSERT_TRUE(second.RoundTrip());
  ASSERT_TRUE(Eventually([&] { return server_->stats().active_connections == 2; }));

  // When a third connects and calls, it is closed without an answer.
  RawConnection third(server_->port());
  ASSERT_TRUE(third.connected());  // accepted by the kernel, then closed
  third.Send(ListNodesCall());
  EXPECT_EQ(third.Await(2s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(Eventually([&] { return server_->stats().refused_connections == 1; }));

  // The two served ones still work; once one leaves, a newcomer is served.
  EXPECT_TRUE(first.RoundTrip());
  EXPECT_TRUE(second.RoundTrip());
  first.Close();
  ASSERT_TRUE(Eventually([&] { return server_->stats().active_connections == 1; }));
  RawConnection fourth(server_->port());
  EXPECT_TRUE(fourth.RoundTrip());
  EXPECT_EQ(server_->stats().refused_connections, 1u);
  EXPECT_EQ(server_->stats().accepted_connections, 3u);
}

// Out of descriptors, accept() fails while a connection waits. The server
// must keep listening (Thrift's threaded server stopped for good on such an
// error) and must not spin on the listener (epoll reported it again at
// once, for ever); once descriptors are free, the waiting connection and
// new ones are answered.
TEST_P(RpcServerTest, AnAcceptOutOfDescriptorsLeavesTheServerListening) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawConnection warm(server_->port());
  ASSERT_TRUE(warm.RoundTrip());
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{limit};
  // The next descriptor is the last one this process may open: the client
  // end below takes it, and the server's accept() finds none.
  int next = dup(0);
  ASSERT_GE(next, 0);
  close(next);
  rlimit low = limit;
  low.rlim_cur = static_cast<rlim_t>(next) + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  RawConnection waiting(server_->port());
  ASSERT_TRUE(waiting.connected());
  ASSERT_TRUE(waiting.Send(ListNodesCall()));  // TCP_DEFER_ACCEPT waits for bytes

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(600ms);
  getrusage(RUSAGE_SELF, &after);
  auto cpu = [](const rusage& r) {
    return std::chrono::seconds(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           std::chrono::microseconds(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
  };
  EXPECT_LT(cpu(after) - cpu(before), 150ms) << "the server spun while out of descriptors";

  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(waiting.Await(5s), RawConnection::Outcome::kAnswered)
      << "the connection that waited was never served";
  RawConnection fresh(server_->port());
  EXPECT_TRUE(fresh.RoundTrip()) << "the server stopped listening";
}

TEST_P(RpcServerTest, RejectedFramesDoNotPoisonTheThreadsThatServeLaterCalls) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // A depth-limit exception leaves Thrift's depth count raised in the
  // protocol that threw; pool threads reuse theirs, so a rejected frame must
  // not make every later call on that thread fail too.
  constexpr int kRounds = 16;
  for (int i = 0; i < kRounds; ++i) {
    RawConnection deep(server_->port());
    ASSERT_TRUE(deep.Send(ListNodesWithNestedStructs(kRpcMaxDepth)));
    EXPECT_EQ(deep.Await(3s), RawConnection::Outcome::kClosed);
  }
  for (int i = 0; i < kRounds; ++i) {
    RawConnection conn(server_->port());
    EXPECT_TRUE(conn.RoundTrip()) << "call " << i << " after the rejected frames";
  }
  EXPECT_EQ(Faults(RpcFault::kDepthLimit), static_cast<uint64_t>(kRounds));
}

// Sends `burst`, ListNodes calls 0 to `frames` - 1, in one write to `port`
// and expects one reply to each, in order.
void ExpectListNodesAnsweredInOrder(int port, const std::string& burst, int frames) {
  RawConnection conn(port);
  ASSERT_TRUE(conn.Send(burst));
  ReplyReader replies(conn);
  for (int i = 0; i < frames; ++i) {
    auto reply = replies.Next();
    ASSERT_TRUE(reply) << "no reply to frame " << i;
    EXPECT_EQ(ReadI32(*reply, 0), kReplyHeader);
    EXPECT_EQ(ReplyNameAndSeqId(*reply), std::make_pair(std::string("ListNodes"), i))
        << "replies out of order";
  }
  EXPECT_TRUE(conn.RoundTrip("ListNodes"));
}

TEST_P(RpcServerTest, PipelinedFramesBeyondOneReadAreAnsweredInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // More frames than one read of the connection's buffer holds, sent at once.
  constexpr int kFrames = 2000;
  std::string burst;
  for (int i = 0; i < kFrames; ++i) {
    burst += Wire().Call("ListNodes", static_cast<uint32_t>(i)).Stop().Framed();
  }
  ASSERT_GT(burst.size(), 32u << 10);
  ExpectListNodesAnsweredInOrder(server_->port(), burst, kFrames);
}

// A master whose ListNodes blocks until released.
class BlockingMaster : public rpc::MasterServiceNull {
 public:
  void ListNodes(std::vector<rpc::NodeInfo>& /*nodes*/) override {
    std::unique_lock lock(mu_);
    ++blocked_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
  }
  void WaitBlocked(int n) {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, 10s, [&] { return blocked_ >= n; });
  }
  int blocked() {
    std::lock_guard lock(mu_);
    return blocked_;
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int blocked_ = 0;
  bool released_ = false;
};

TEST_P(RpcServerTest, HandlersThatBlockDoNotStallOtherConnections) {
  auto master = std::make_shared<BlockingMaster>();
  // On the loop, a call that blocks must be declared so.
  may_block_ = [](std::string_view method) { return method == "ListNodes"; };
  ASSERT_NO_FATAL_FAILURE(StartServer({}, master));
  auto& server = server_;
  // However this test ends, the handlers return, so the server can stop.
  struct ReleaseOnExit {
    BlockingMaster& master;
    ~ReleaseOnExit() { master.Release(); }
  } release_on_exit{*master};
  // More blocked calls than the pool starts with.
  constexpr int kBlocked = 8;
  std::vector<RawConnection> blocked;
  for (int i = 0; i < kBlocked; ++i) {
    blocked.emplace_back(server->port());
    ASSERT_TRUE(blocked.back().Send(ListNodesCall()));
  }
  master->WaitBlocked(kBlocked);
  ASSERT_EQ(master->blocked(), kBlocked) << "the pool did not grow to serve every connection";

  // Then another connection is still answered at once.
  RawConnection other(server->port());
  EXPECT_TRUE(other.RoundTrip("GetRole"));

  master->Release();
  for (auto& conn : blocked) EXPECT_TRUE(conn.ReadFrame()) << "a blocked call was not answered";
  server->Stop();
}

// A master that answers AnnounceKeys with the keys it was sent.
class EchoingMaster : public rpc::MasterServiceNull {
 public:
  void AnnounceKeys(rpc::AnnounceResult& result, const std::string& /*node_id*/,
                    const std::vector<std::string>& keys) override {
    result.code = rpc::ErrorCode::OK;
    result.rejected = keys;
  }
};

// Strings of `size` bytes whose contents depend on `seed` and the position.
std::string PatternOf(size_t size, int seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return s;
}

TEST_P(RpcServerTest, LargeFieldsSentFromTheCallersMemoryArriveWholeAndInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}, std::make_shared<EchoingMaster>()));
  // Writes of 64 KiB and more skip the frame buffer (both ways on the
  // threads engine, the request on epoll); small ones around them do not.
  std::vector<std::string> keys;
  int seed = 0;
  for (size_t size : {size_t{10}, size_t{100} << 10, size_t{3}, size_t{64} << 10,
                      (size_t{64} << 10) - 1, size_t{300} << 10, size_t{0}, size_t{1} << 20}) {
    keys.push_back(PatternOf(size, ++seed));
  }
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", server_->port());
  for (int round = 0; round < 3; ++round) {  // the connection is reused
    auto echoed = channel.Call([&](auto& c) {
      rpc::AnnounceResult r;
      c.AnnounceKeys(r, "node-" + std::to_string(round), keys);
      return r;
    });
    ASSERT_TRUE(echoed) << ToString(echoed.error());
    ASSERT_EQ(echoed->rejected.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(echoed->rejected[i] == keys[i]) << "key " << i << " of round " << round;
    }
  }
}

TEST_P(RpcServerTest, LargeAndSmallFramesPipelinedTogetherAreAnsweredInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // Reads take less ahead after a frame over 64 KiB: frames of 100 KiB,
  // a few KiB and a few bytes, back to back in one send, each still decode
  // whole (the large ones carry an unknown field, which the server skips).
  constexpr int kFrames = 24;
  std::string burst;
  for (int i = 0; i < kFrames; ++i) {
    Wire w;
    w.Call("ListNodes", static_cast<uint32_t>(i));
    if (i % 3 != 2) {
      const size_t padding = i % 3 == 0 ? (100u << 10) + i : 3000 + i;
      w.Field(T_STRING, 9).Str(PatternOf(padding, i));
    }
    burst += w.Stop().Framed();
  }
  ExpectListNodesAnsweredInOrder(server_->port(), burst, kFrames);
}

TEST_P(RpcServerTest, ARequestOverTheFrameLimitFailsAtTheClientAndTheChannelRecovers) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}, std::make_shared<EchoingMaster>()));
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", server_->port());
  const std::vector<std::string> too_much(17, std::string(1u << 20, 'x'));
  auto failed = channel.Call([&](auto& c) {
    rpc::AnnounceResult r;
    c.AnnounceKeys(r, "n", too_much);
    return r;
  });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error(), ErrorCode::kRpcFail);
  auto fine = channel.Call([&](auto& c) {
    rpc::AnnounceResult r;
    c.AnnounceKeys(r, "n", {std::string(100u << 10, 'y')});
    return r;
  });
  ASSERT_TRUE(fine) << ToString(fine.error());
  EXPECT_EQ(fine->rejected.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Engines, RpcServerTest,
                         ::testing::Values(Serving::kThreads, Serving::kEpollPool,
                                           Serving::kEpollLoop),
                         [](const ::testing::TestParamInfo<Serving>& info) {
                           switch (info.param) {
                             case Serving::kThreads:
                               return "Threads";
                             case Serving::kEpollPool:
                               return "EpollPool";
                             case Serving::kEpollLoop:
                               return "EpollLoop";
                           }
                           return "Unknown";
                         });

// ---- The epoll engine's loop threads and pool ----

// An epoll-engine server of `processor` with `limits` where the calls
// `may_block` names go to the pool.
std::unique_ptr<RpcServer> StartEpollProcessor(
    std::shared_ptr<apache::thrift::TProcessor> processor,
    std::function<bool(std::string_view)> may_block, int loop_threads = 0,
    RpcServerLimits limits = {}) {
  RpcServerOptions options{.host = "127.0.0.1", .port = 0};
  options.limits = limits;
  options.limits.engine = RpcEngine::kEpoll;
  options.may_block = std::move(may_block);
  options.loop_threads = loop_threads;
  auto started = RpcServer::Start(std::move(processor), options);
  EXPECT_TRUE(started) << ToString(started.error());
  return started ? std::move(*started) : nullptr;
}

// An epoll-engine server of `handler` where the calls `may_block` names go
// to the pool.
std::unique_ptr<RpcServer> StartEpollServer(std::shared_ptr<rpc::MasterServiceIf> handler,
                                            std::function<bool(std::string_view)> may_block,
                                            int loop_threads = 0) {
  return StartEpollProcessor(std::make_shared<rpc::MasterServiceProcessor>(std::move(handler)),
                             std::move(may_block), loop_threads);
}

// A master that counts, per call, whether it ran where it may block.
class WhereCalledMaster : public rpc::MasterServiceNull {
 public:
  void ListNodes(std::vector<rpc::NodeInfo>& /*nodes*/) override {
    (RpcCallMayBlock() ? list_nodes_in_pool : list_nodes_on_loop).fetch_add(1);
  }
  void GetRole(rpc::MasterRole& /*role*/) override {
    (RpcCallMayBlock() ? get_role_in_pool : get_role_on_loop).fetch_add(1);
  }

  std::atomic<int> list_nodes_on_loop{0};
  std::atomic<int> list_nodes_in_pool{0};
  std::atomic<int> get_role_on_loop{0};
  std::atomic<int> get_role_in_pool{0};
};

TEST(RpcEventServerTest, TheLoopAnswersCallsThatCannotBlockAndThePoolTheRest) {
  auto master = std::make_shared<WhereCalledMaster>();
  auto server =
      StartEpollServer(master, [](std::string_view method) { return method == "ListNodes"; });
  ASSERT_NE(server, nullptr);
  RawConnection conn(server->port());
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(conn.RoundTrip(i % 2 == 0 ? "ListNodes" : "GetRole")) << "call " << i;
  }
  EXPECT_EQ(master->list_nodes_in_pool.load(), kCalls / 2);
  EXPECT_EQ(master->list_nodes_on_loop.load(), 0);
  EXPECT_EQ(master->get_role_on_loop.load(), kCalls / 2);
  EXPECT_EQ(master->get_role_in_pool.load(), 0);
}

TEST(RpcEventServerTest, PipelinedCallsGoingToThePoolAndBackAreAnsweredInOrder) {
  auto master = std::make_shared<WhereCalledMaster>();
  auto server =
      StartEpollServer(master, [](std::string_view method) { return method == "ListNodes"; });
  ASSERT_NE(server, nullptr);
  // Bursts that start on the loop and reach the pool with frames still
  // received (the pool answers those too, then gives the connection back).
  constexpr int kBursts = 20;
  constexpr int kFramesPerBurst = 15;
  RawConnection conn(server->port());
  ReplyReader replies(conn);
  for (int burst = 0; burst < kBursts; ++burst) {
    std::string frames;
    for (int i = 0; i < kFramesPerBurst; ++i) {
      auto seqid = static_cast<uint32_t>(burst * kFramesPerBurst + i);
      frames += Wire().Call(i % 3 == 2 ? "ListNodes" : "GetRole", seqid).Stop().Framed();
    }
    ASSERT_TRUE(conn.Send(frames));
    for (int i = 0; i < kFramesPerBurst; ++i) {
      auto reply = replies.Next();
      ASSERT_TRUE(reply) << "no reply to frame " << i << " of burst " << burst;
      auto [name, seqid] = ReplyNameAndSeqId(*reply);
      EXPECT_EQ(name, i % 3 == 2 ? "ListNodes" : "GetRole");
      ASSERT_EQ(seqid, burst * kFramesPerBurst + i) << "replies out of order";
    }
  }
  // Each burst starts on the loop, with a GetRole.
  EXPECT_GE(master->get_role_on_loop.load(), kBursts);
  EXPECT_EQ(master->list_nodes_on_loop.load(), 0);
}

// A master whose GetRole, on a loop thread, hands itself to the pool.
class HandingOverMaster : public rpc::MasterServiceNull {
 public:
  void GetRole(rpc::MasterRole& role) override {
    if (!RpcCallMayBlock()) {
      handed_over.fetch_add(1);
      role.cluster_name = "answered on the loop";  // must never reach the caller
      RpcHandCallToPool();
      return;
    }
    answered_in_pool.fetch_add(1);
    role.cluster_name = "answered in the pool";
  }

  std::atomic<int> handed_over{0};
  std::atomic<int> answered_in_pool{0};
};

TEST(RpcEventServerTest, ACallHandedToThePoolFromTheLoopIsAnsweredOnceFromThePool) {
  auto master = std::make_shared<HandingOverMaster>();
  auto server = StartEpollServer(master, [](std::string_view) { return false; });
  ASSERT_NE(server, nullptr);
  RawConnection conn(server->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(conn.Send(Wire().Call("GetRole", static_cast<uint32_t>(i)).Stop().Framed()));
    auto reply = conn.ReadFrame();
    ASSERT_TRUE(reply) << "no reply to call " << i;
    EXPECT_EQ(ReplyNameAndSeqId(*reply).second, i);
    EXPECT_NE(reply->find("answered in the pool"), std::string::npos);
    EXPECT_EQ(reply->find("answered on the loop"), std::string::npos);
    // Exactly one reply per call.
    EXPECT_FALSE(conn.Readable(50ms));
  }
  EXPECT_EQ(master->handed_over.load(), 3);
  EXPECT_EQ(master->answered_in_pool.load(), 3);
  EXPECT_TRUE(conn.RoundTrip("ListNodes"));  // the loop serves the connection again
}

// A master whose ListNodes answers with about `bytes` of node ids.
class LargeListMaster : public rpc::MasterServiceNull {
 public:
  explicit LargeListMaster(size_t bytes) : bytes_(bytes) {}
  void ListNodes(std::vector<rpc::NodeInfo>& nodes) override {
    constexpr size_t kIdBytes = 1000;
    nodes.resize(bytes_ / kIdBytes);
    for (size_t i = 0; i < nodes.size(); ++i) nodes[i].node_id = PatternOfSize(kIdBytes, i);
  }

 private:
  static std::string PatternOfSize(size_t size, size_t seed) {
    std::string s(size, 'a');
    for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>('a' + (i + seed) % 26);
    return s;
  }
  const size_t bytes_;
};

// A peer that takes its reply a few KiB at a time lets every single send
// make progress, so a timeout on each send never fires; the reply (and
// whatever it pins) would be held for as long as the peer likes. The read
// timeout bounds the whole reply: the connection is closed and counted.
TEST_P(RpcServerTest, AReplyTakenAFewBytesAtATimeIsCutAtTheReadTimeout) {
  constexpr size_t kReplyBytes = 15'000'000;  // more than loopback's buffers hold
  ASSERT_NO_FATAL_FAILURE(
      StartServer({.read_timeout_ms = 1000}, std::make_shared<LargeListMaster>(kReplyBytes)));
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.Send(ListNodesCall()));
  // About 2 MB/s, 64 KiB at a time: each send the server makes gets room
  // well within the timeout, but what the socket buffers do not hold takes
  // seconds.
  const auto give_up = Clock::now() + 20s;
  size_t taken = 0;
  while (Faults(RpcFault::kSlowReader) == 0 && Clock::now() < give_up && taken < kReplyBytes) {
    std::string piece;
    for (int i = 0; i < 4; ++i) {
      if (conn.Receive(1s, &piece) == RawConnection::Outcome::kClosed) break;
    }
    taken += piece.size();
    std::this_thread::sleep_for(32ms);
  }
  EXPECT_TRUE(Eventually([&] { return Faults(RpcFault::kSlowReader) == 1; }, 2s))
      << "a reply the peer took slowly was sent on (" << taken << " bytes taken)";
  EXPECT_TRUE(Eventually([&] { return server_->stats().active_connections == 0; }, 2s));
}

TEST(RpcEventServerTest, AReplyAPeerDoesNotReadDoesNotStallTheLoop) {
  // More than loopback's socket buffers hold (4 MiB to send, 6 MiB to
  // receive at most), under the 16 MiB frame limit.
  constexpr size_t kReplyBytes = 15'000'000;
  auto master = std::make_shared<LargeListMaster>(kReplyBytes);
  auto server = StartEpollServer(
      master, [](std::string_view) { return false; },
      /*loop_threads=*/1);
  ASSERT_NE(server, nullptr);
  RawConnection reader(server->port());
  ASSERT_TRUE(reader.Send(ListNodesCall()));
  // The only loop thread has begun the reply; the peer does not read it.
  ASSERT_TRUE(reader.Readable(5s));
  RawConnection other(server->port());
  EXPECT_TRUE(other.RoundTrip("GetRole")) << "the loop waited for the slow reader";
  // The pool sends the rest once the peer reads.
  auto reply = reader.ReadFrame(20s);
  ASSERT_TRUE(reply) << "the large reply did not arrive whole";
  EXPECT_GT(reply->size(), kReplyBytes);
  EXPECT_EQ(ReplyNameAndSeqId(*reply).first, "ListNodes");
  EXPECT_TRUE(reader.RoundTrip("GetRole"));
}

// A master whose GetLocation holds the thread that answers it until the
// test opens a gate, and whose ListNodes notes how many GetRoles were
// answered before it.
class GatedMaster : public rpc::MasterServiceNull {
 public:
  void GetLocation(rpc::LocationResult& /*result*/, const std::string& /*key*/) override {
    std::unique_lock lock(mu_);
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void GetRole(rpc::MasterRole& /*role*/) override { get_roles.fetch_add(1); }
  void ListNodes(std::vector<rpc::NodeInfo>& /*nodes*/) override {
    get_roles_before_list_nodes.store(get_roles.load());
  }

  bool AwaitHeld() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return held_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

  std::atomic<int64_t> get_roles{0};
  std::atomic<int64_t> get_roles_before_list_nodes{-1};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool open_ = false;
};

// `stream` sent on `conn` from one thread, in pieces that end inside frames,
// while another drains the replies until `answered()` (or the server stops
// answering for 5 s).
class PipelinedStream {
 public:
  PipelinedStream(RawConnection& conn, std::string_view stream, std::function<bool()> answered)
      : sender_([&conn, stream, this] {
          // Prime: no piece but the last ends where a frame does, so nothing
          // the server reads ends between frames because a send did.
          constexpr size_t kPiece = 65521;
          for (size_t at = 0; at < stream.size(); at += kPiece) {
            if (!conn.Send(stream.substr(at, kPiece))) return;
          }
          sent_all_ = true;
        }),
        drainer_([&conn, answered = std::move(answered)] {
          while (!answered()) {
            std::string got;
            if (conn.Receive(5s, &got) != RawConnection::Outcome::kAnswered) return;
          }
        }) {}
  // True if the whole stream was sent.
  bool Join() {
    sender_.join();
    drainer_.join();
    return sent_all_;
  }

 private:
  bool sent_all_ = false;
  std::thread sender_;
  std::thread drainer_;
};

// The only loop thread is held while a peer that keeps pipelining calls
// fills its socket and another connection sends one call. Once let go, the
// loop serves the busy peer a share at a time, so the other call is answered
// long before the peer's stream ends. (It went on reading while its last
// read ended inside a frame, so the peer held the loop for as long as it
// kept sending.)
TEST(RpcEventServerTest, APeerThatKeepsSendingLeavesTheLoopToOtherConnections) {
  auto master = std::make_shared<GatedMaster>();
  auto server = StartEpollServer(
      master, [](std::string_view) { return false; },
      /*loop_threads=*/1);
  ASSERT_NE(server, nullptr);
  RawConnection other(server->port());
  RawConnection busy(server->port());
  RawConnection gate(server->port());
  ASSERT_TRUE(other.RoundTrip("ListNodes"));

  // 24-byte frames: a read of the loop's 16 KiB never ends between two.
  const std::string call = Wire().Call("GetRole").Stop().Framed();
  constexpr int64_t kCalls = 350'000;  // 8 MiB
  std::string stream;
  stream.reserve(kCalls * call.size());
  for (int64_t i = 0; i < kCalls; ++i) stream += call;
  // A first stream, answered whole: the kernel sizes the busy peer's
  // socket buffers up to the rate, so that the one held back below keeps
  // the loop's reads full.
  PipelinedStream warm_up(busy, stream, [&] { return master->get_roles.load() >= kCalls; });
  ASSERT_TRUE(warm_up.Join());
  ASSERT_EQ(master->get_roles.load(), kCalls);

  ASSERT_TRUE(gate.Send(Wire().Call("GetLocation").Stop().Framed()));
  ASSERT_TRUE(master->AwaitHeld());
  PipelinedStream held(busy, stream, [&] { return master->get_roles.load() >= 2 * kCalls; });
  // Time for the stream to fill the server's socket (the checks below hold
  // however long this is).
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(other.Send(Wire().Call("ListNodes").Stop().Framed()));
  master->Open();
  EXPECT_TRUE(other.ReadFrame(20s)) << "the other connection was not answered";
  EXPECT_TRUE(held.Join());
  EXPECT_EQ(master->get_roles.load(), 2 * kCalls) << "the busy peer was not answered whole";
  EXPECT_LT(master->get_roles_before_list_nodes.load(), kCalls + kCalls / 2)
      << "the other connection waited for the busy peer's stream";
  EXPECT_TRUE(gate.ReadFrame());
}

// ---- Deferred replies (RpcDeferReply) on the epoll engine ----

// The sequence id of the call this thread is dispatching (SeqIdProcessor):
// a deferred reply must carry it, and the generated handler does not get it.
thread_local int32_t dispatching_seqid = -1;

// The MasterService processor, telling handlers their call's sequence id.
class SeqIdProcessor : public rpc::MasterServiceProcessor {
 public:
  using rpc::MasterServiceProcessor::MasterServiceProcessor;

 protected:
  bool dispatchCall(apache::thrift::protocol::TProtocol* in,
                    apache::thrift::protocol::TProtocol* out, const std::string& fname,
                    int32_t seqid, void* context) override {
    dispatching_seqid = seqid;
    return rpc::MasterServiceProcessor::dispatchCall(in, out, fname, seqid, context);
  }
};

// An epoll-engine server of `handler` through SeqIdProcessor, where no call
// blocks (the loop answers them all) unless `may_block` says otherwise.
std::unique_ptr<RpcServer> StartDeferringServer(
    std::shared_ptr<rpc::MasterServiceIf> handler, int loop_threads = 0,
    std::function<bool(std::string_view)> may_block = [](std::string_view) { return false; }) {
  return StartEpollProcessor(std::make_shared<SeqIdProcessor>(std::move(handler)),
                             std::move(may_block), loop_threads);
}

// Writes a whole GetRole reply of `seqid` whose role's cluster name is
// `cluster_name` into `reply`, as the generated processor writes one.
void WriteGetRoleReply(RpcDeferredReply& reply, int32_t seqid, const std::string& cluster_name) {
  apache::thrift::protocol::TProtocol& out = reply.protocol();
  rpc::MasterService_GetRole_result result;
  result.success.cluster_name = cluster_name;
  result.__isset.success = true;
  out.writeMessageBegin("GetRole", apache::thrift::protocol::T_REPLY, seqid);
  result.write(&out);
  out.writeMessageEnd();
  out.getTransport()->writeEnd();
  out.getTransport()->flush();
}

// The cluster name a deferred reply to `seqid` carries.
std::string DeferredName(int32_t seqid) { return "deferred " + std::to_string(seqid); }

// The sequence id and cluster name of a GetRole reply frame's payload,
// decoded with the generated reader; nullopt unless the payload is exactly
// one well-formed GetRole reply.
std::optional<std::pair<int32_t, std::string>> DecodeGetRoleReply(const std::string& payload) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
      reinterpret_cast<uint8_t*>(const_cast<char*>(payload.data())),
      static_cast<uint32_t>(payload.size()), apache::thrift::transport::TMemoryBuffer::COPY);
  apache::thrift::protocol::TBinaryProtocol in(buffer);
  try {
    std::string name;
    apache::thrift::protocol::TMessageType type;
    int32_t seqid = 0;
    in.readMessageBegin(name, type, seqid);
    if (name != "GetRole" || type != apache::thrift::protocol::T_REPLY) return std::nullopt;
    rpc::MasterRole role;
    rpc::MasterService_GetRole_presult result;
    result.success = &role;
    result.read(&in);
    in.readMessageEnd();
    if (!result.__isset.success || buffer->available_read() != 0) return std::nullopt;
    return std::make_pair(seqid, role.cluster_name);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// What the processor would answer for a GetRole whose reply was deferred:
// it must never reach the caller.
constexpr std::string_view kProcessorsReply = "the processor's own reply";

// Sends GetRole calls `first` to `last - 1`, one at a time, and expects
// exactly one reply to each, well formed and carrying `name`.
void ExpectEachAnsweredOnceWith(RawConnection& conn, int first, int last, const std::string& name) {
  for (int i = first; i < last; ++i) {
    ASSERT_TRUE(conn.Send(Wire().Call("GetRole", static_cast<uint32_t>(i)).Stop().Framed()));
    auto reply = conn.ReadFrame(2s);
    ASSERT_TRUE(reply) << "no reply to call " << i;
    EXPECT_EQ(DecodeGetRoleReply(*reply), std::make_pair(int32_t{i}, name));
    EXPECT_FALSE(conn.Readable(50ms)) << "more than one reply to call " << i;
  }
}

// A master whose GetRole takes its call's reply (RpcDeferReply) and does
// with it what `mode` says; ListNodes answers at once.
class DeferringMaster : public rpc::MasterServiceNull {
 public:
  enum class Mode {
    kDefer,                // hand the reply to the test (TakeDeferred), unsent
    kSendInCall,           // write it and Send() it before returning
    kDropInCall,           // let it go unsent before returning
    kCancel,               // write into it, Cancel() it, and answer as usual
    kCancelAndHandToPool,  // on the loop: Cancel(), RpcHandCallToPool(); in the pool: as usual
  };
  // A reply the handler deferred, and its call's sequence id.
  struct Deferred {
    std::shared_ptr<RpcDeferredReply> reply;
    int32_t seqid = -1;
  };

  explicit DeferringMaster(Mode mode = Mode::kDefer) : mode_(mode) {}

  void GetRole(rpc::MasterRole& role) override {
    const int32_t seqid = dispatching_seqid;
    calls.fetch_add(1);
    std::shared_ptr<RpcDeferredReply> reply = RpcDeferReply();
    if (!reply) {
      null_replies.fetch_add(1);
      role.cluster_name = "not deferred";
      return;
    }
    if (RpcDeferReply() != reply) twice_differs.fetch_add(1);
    switch (mode_.load()) {
      case Mode::kDefer: {
        role.cluster_name = kProcessorsReply;
        std::lock_guard lock(mu_);
        seqids_.push_back(seqid);
        max_outstanding_ = std::max(max_outstanding_, ++outstanding_);
        deferred_.push_back({std::move(reply), seqid});
        changed_.notify_all();
        return;
      }
      case Mode::kSendInCall:
        role.cluster_name = kProcessorsReply;
        WriteGetRoleReply(*reply, seqid, "sent in the call");
        reply->Send();
        return;
      case Mode::kDropInCall:
        role.cluster_name = kProcessorsReply;
        return;
      case Mode::kCancel: {
        WriteGetRoleReply(*reply, seqid, "cancelled: never sent");
        reply->Cancel();
        role.cluster_name = "answered as usual";
        std::lock_guard lock(mu_);
        cancelled_.push_back(std::move(reply));  // kept past the call
        return;
      }
      case Mode::kCancelAndHandToPool:
        if (!RpcCallMayBlock()) {
          reply->Cancel();
          role.cluster_name = "answered on the loop";  // must never reach the caller
          RpcHandCallToPool();
          return;
        }
        reply->Cancel();  // taken again in the pool: answered as usual there
        role.cluster_name = "answered in the pool";
        return;
    }
  }

  // The next reply the handler deferred, or nullopt if none within `timeout`.
  std::optional<Deferred> TakeDeferred(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return !deferred_.empty(); })) {
      return std::nullopt;
    }
    Deferred next = std::move(deferred_.front());
    deferred_.pop_front();
    return next;
  }
  // Before a deferred reply is sent: it no longer counts as outstanding.
  void Settling() {
    std::lock_guard lock(mu_);
    --outstanding_;
  }
  // Deferred replies outstanding at once, at most.
  int max_outstanding() {
    std::lock_guard lock(mu_);
    return max_outstanding_;
  }
  // The sequence ids of the calls that deferred, in the order they ran.
  std::vector<int32_t> seqids() {
    std::lock_guard lock(mu_);
    return seqids_;
  }
  std::vector<std::shared_ptr<RpcDeferredReply>> TakeCancelled() {
    std::lock_guard lock(mu_);
    return std::exchange(cancelled_, {});
  }
  // Lets go of every reply still held: a server stops only once all are
  // gone.
  void DropAll() {
    std::deque<Deferred> deferred;
    std::vector<std::shared_ptr<RpcDeferredReply>> cancelled;
    {
      std::lock_guard lock(mu_);
      deferred.swap(deferred_);
      cancelled.swap(cancelled_);
    }
  }
  void set_mode(Mode mode) { mode_.store(mode); }

  std::atomic<int> calls{0};
  std::atomic<int> null_replies{0};
  std::atomic<int> twice_differs{0};

 private:
  std::atomic<Mode> mode_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Deferred> deferred_;
  std::vector<std::shared_ptr<RpcDeferredReply>> cancelled_;
  std::vector<int32_t> seqids_;
  int outstanding_ = 0;
  int max_outstanding_ = 0;
};

// Declared after its server: drops the master's replies before the server
// stops (which waits for them), however the test ends.
struct DropDeferredOnExit {
  DeferringMaster& master;
  ~DropDeferredOnExit() { master.DropAll(); }
};

// Sends GetRole `seqid` on `conn` and returns the reply `master` deferred
// for it (nullopt if the call could not be sent or was not deferred).
std::optional<DeferringMaster::Deferred> SendDeferredCall(DeferringMaster& master,
                                                          RawConnection& conn, uint32_t seqid) {
  if (!conn.Send(Wire().Call("GetRole", seqid).Stop().Framed())) return std::nullopt;
  return master.TakeDeferred();
}

TEST(RpcEventServerTest, AReplyDeferredOnTheLoopAndSentFromAnotherThreadReachesTheCaller) {
  auto master = std::make_shared<DeferringMaster>();
  // One loop thread: it must not be held while the reply waits.
  auto server = StartDeferringServer(master, /*loop_threads=*/1);
  ASSERT_NE(server, nullptr);
  DropDeferredOnExit drop_on_exit{*master};
  RawConnection conn(server->port());
  auto deferred = SendDeferredCall(*master, conn, 7);
  ASSERT_TRUE(deferred) << "the handler did not run";
  EXPECT_EQ(deferred->seqid, 7);
  EXPECT_EQ(master->twice_differs.load(), 0) << "RpcDeferReply twice gave two objects";

  // Nothing reaches the caller before the reply is sent ...
  EXPECT_FALSE(conn.Readable(50ms)) << "an answer came before the deferred reply was sent";
  // ... while the loop goes on serving other connections.
  RawConnection other(server->port());
  EXPECT_TRUE(other.RoundTrip("ListNodes")) << "the loop waited for the deferred reply";
  EXPECT_TRUE(other.RoundTrip("ListNodes"));
  EXPECT_FALSE(conn.Readable(0ms));

  // The answer comes on another thread, later.
  std::latch go(1);
  std::thread sender([&go, deferred = std::move(*deferred)]() mutable {
    go.wait();
    WriteGetRoleReply(*deferred.reply, deferred.seqid, DeferredName(deferred.seqid));
    deferred.reply->Send();
  });
  go.count_down();
  auto reply = conn.ReadFrame(2s);
  sender.join();
  ASSERT_TRUE(reply) << "the deferred reply did not arrive";
  EXPECT_EQ(ReadI32(*reply, 0), kReplyHeader);
  EXPECT_EQ(DecodeGetRoleReply(*reply), std::make_pair(int32_t{7}, DeferredName(7)));
  EXPECT_EQ(reply->find(kProcessorsReply), std::string::npos);
  EXPECT_FALSE(conn.Readable(50ms)) << "more than one reply";
  // The connection goes on with its next call.
  EXPECT_TRUE(conn.RoundTrip("ListNodes"));
}

TEST(RpcEventServerTest, PipelinedCallsThatEachDeferAreAnsweredOnceEachInOrder) {
  auto master = std::make_shared<DeferringMaster>();
  auto server = StartDeferringServer(master);
  ASSERT_NE(server, nullptr);
  DropDeferredOnExit drop_on_exit{*master};
  constexpr int kBursts = 3;
  constexpr int kFramesPerBurst = 10;
  constexpr int kCalls = kBursts * kFramesPerBurst;
  // Sends each deferred reply as it comes: the first of a burst's on the
  // loop, the rest on the pool, which answers the frames already here.
  // (A jthread: joined however the test ends, before the server stops.)
  std::jthread sender([&](std::stop_token stop) {
    for (int i = 0; i < kCalls && !stop.stop_requested(); ++i) {
      auto deferred = master->TakeDeferred(1s);
      if (!deferred) return;
      WriteGetRoleReply(*deferred->reply, deferred->seqid, DeferredName(deferred->seqid));
      master->Settling();
      deferred->reply->Send();
    }
  });
  RawConnection conn(server->port());
  ReplyReader replies(conn);
  for (int burst = 0; burst < kBursts; ++burst) {
    std::string frames;
    for (int i = 0; i < kFramesPerBurst; ++i) {
      frames += Wire()
                    .Call("GetRole", static_cast<uint32_t>(burst * kFramesPerBurst + i))
                    .Stop()
                    .Framed();
    }
    ASSERT_TRUE(conn.Send(frames));
    for (int i = 0; i < kFramesPerBurst; ++i) {
      const int32_t expected = burst * kFramesPerBurst + i;
      auto reply = replies.Next();
      ASSERT_TRUE(reply) << "no reply to frame " << i << " of burst " << burst;
      auto decoded = DecodeGetRoleReply(*reply);
      ASSERT_TRUE(decoded) << "not a well-formed GetRole reply";
      ASSERT_EQ(decoded->first, expected) << "replies out of order";
      EXPECT_EQ(decoded->second, DeferredName(expected));
    }
  }
  sender.join();
  EXPECT_FALSE(conn.Readable(50ms)) << "more replies than calls";
  EXPECT_EQ(master->calls.load(), kCalls);
  std::vector<int32_t> in_order(kCalls);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(master->seqids(), in_order) << "the calls did not run in order";
  // A connection answers no other call while a reply waits.
  EXPECT_EQ(master->max_outstanding(), 1);
  EXPECT_TRUE(conn.RoundTrip("ListNodes"));
}

TEST(RpcEventServerTest, AReplySentWithinItsHandlerIsTheCallsOnlyReply) {
  // On the loop, and on the pool.
  for (bool pool : {false, true}) {
    SCOPED_TRACE(pool ? "pool" : "loop");
    auto master = std::make_shared<DeferringMaster>(DeferringMaster::Mode::kSendInCall);
    auto server = StartDeferringServer(master, 0, [pool](std::string_view) { return pool; });
    ASSERT_NE(server, nullptr);
    RawConnection conn(server->port());
    ASSERT_NO_FATAL_FAILURE(ExpectEachAnsweredOnceWith(conn, 0, 3, "sent in the call"));
    EXPECT_EQ(master->calls.load(), 3);
    EXPECT_EQ(master->null_replies.load(), 0);
    EXPECT_TRUE(conn.RoundTrip("ListNodes"));
  }
}

TEST(RpcEventServerTest, ADeferredReplyDroppedUnsentClosesItsConnectionAndNoOther) {
  auto master = std::make_shared<DeferringMaster>();
  auto server = StartDeferringServer(master, /*loop_threads=*/1);
  ASSERT_NE(server, nullptr);
  DropDeferredOnExit drop_on_exit{*master};
  RawConnection bystander(server->port());
  ASSERT_TRUE(bystander.RoundTrip("ListNodes"));

  // Let go of by another thread, after the call.
  RawConnection conn(server->port());
  auto deferred = SendDeferredCall(*master, conn, 1);
  ASSERT_TRUE(deferred);
  EXPECT_FALSE(conn.Readable(50ms));
  deferred.reset();
  std::string got;
  EXPECT_TRUE(conn.ReadUntilClosed(2s, &got)) << "the connection stayed open";
  EXPECT_TRUE(got.empty()) << "got " << got.size() << " bytes before the close";

  // Let go of within the call.
  master->set_mode(DeferringMaster::Mode::kDropInCall);
  RawConnection dropped_in_call(server->port());
  ASSERT_TRUE(dropped_in_call.Send(Wire().Call("GetRole", 2).Stop().Framed()));
  got.clear();
  EXPECT_TRUE(dropped_in_call.ReadUntilClosed(2s, &got)) << "the connection stayed open";
  EXPECT_TRUE(got.empty()) << "got " << got.size() << " bytes before the close";

  // The server goes on: the other connection, new ones, and new deferrals.
  EXPECT_TRUE(bystander.RoundTrip("ListNodes"));
  master->set_mode(DeferringMaster::Mode::kDefer);
  RawConnection fresh(server->port());
  EXPECT_TRUE(fresh.RoundTrip("ListNodes"));
  auto again = SendDeferredCall(*master, fresh, 3);
  ASSERT_TRUE(again);
  WriteGetRoleReply(*again->reply, again->seqid, DeferredName(again->seqid));
  again->reply->Send();
  auto reply = fresh.ReadFrame(2s);
  ASSERT_TRUE(reply);
  EXPECT_EQ(DecodeGetRoleReply(*reply), std::make_pair(int32_t{3}, DeferredName(3)));
  EXPECT_TRUE(Eventually([&] { return server->stats().active_connections == 2; }, 2s))
      << server->stats().active_connections << " connections open, not 2";
}

// The idle timeout counts from the reply, not from the call that waited
// for it: a reply deferred past the timeout leaves its connection open.
TEST(RpcEventServerTest, AReplyDeferredPastTheIdleTimeoutLeavesItsConnectionOpen) {
  auto master = std::make_shared<DeferringMaster>();
  RpcServerLimits limits;
  limits.idle_timeout_ms = 300;
  auto server = StartEpollProcessor(
      std::make_shared<SeqIdProcessor>(master), [](std::string_view) { return false; },
      /*loop_threads=*/0, limits);
  ASSERT_NE(server, nullptr);
  DropDeferredOnExit drop_on_exit{*master};
  RawConnection conn(server->port());
  auto deferred = SendDeferredCall(*master, conn, 9);
  ASSERT_TRUE(deferred);
  std::this_thread::sleep_for(600ms);  // twice the idle timeout
  WriteGetRoleReply(*deferred->reply, deferred->seqid, DeferredName(deferred->seqid));
  deferred->reply->Send();
  auto reply = conn.ReadFrame(2s);
  ASSERT_TRUE(reply) << "the deferred reply did not arrive";
  EXPECT_EQ(DecodeGetRoleReply(*reply), std::make_pair(int32_t{9}, DeferredName(9)));
  std::this_thread::sleep_for(100ms);  // well inside the timeout, counted from the reply
  EXPECT_TRUE(conn.RoundTrip("ListNodes")) << "closed as idle right after its reply";
}

TEST(RpcEventServerTest, StoppingTheServerWaitsForADeferredReplyHeldElsewhere) {
  // The holder sends it, or lets it go unsent.
  for (bool send : {true, false}) {
    SCOPED_TRACE(send ? "sent" : "dropped");
    auto master = std::make_shared<DeferringMaster>();
    auto server = StartDeferringServer(master);
    ASSERT_NE(server, nullptr);
    DropDeferredOnExit drop_on_exit{*master};
    RawConnection conn(server->port());
    auto deferred = SendDeferredCall(*master, conn, 5);
    ASSERT_TRUE(deferred);
    std::atomic<bool> released{false};
    std::thread holder([&released, send, deferred = std::move(*deferred)]() mutable {
      std::this_thread::sleep_for(150ms);
      WriteGetRoleReply(*deferred.reply, deferred.seqid, DeferredName(deferred.seqid));
      released.store(true);
      if (send) deferred.reply->Send();
      deferred.reply.reset();
    });
    const auto began = Clock::now();
    server.reset();  // RpcServer::Stop, then the engine's destruction
    EXPECT_TRUE(released.load()) << "the server stopped while a deferred reply was held";
    EXPECT_GE(Clock::now() - began, 100ms);
    holder.join();
    // The caller is told (a close; the reply may or may not have made it).
    std::string got;
    EXPECT_TRUE(conn.ReadUntilClosed(2s, &got));
  }
}

TEST(RpcEventServerTest, ACallWhoseDeferredReplyIsCancelledIsAnsweredAsUsualOnce) {
  auto master = std::make_shared<DeferringMaster>(DeferringMaster::Mode::kCancel);
  auto server = StartDeferringServer(master, /*loop_threads=*/1);
  ASSERT_NE(server, nullptr);
  DropDeferredOnExit drop_on_exit{*master};
  RawConnection conn(server->port());
  ASSERT_NO_FATAL_FAILURE(ExpectEachAnsweredOnceWith(conn, 0, 3, "answered as usual"));
  // The cancelled replies, kept past their calls, neither send nor close
  // anything later.
  auto cancelled = master->TakeCancelled();
  ASSERT_EQ(cancelled.size(), 3u);
  for (auto& reply : cancelled) reply->Send();
  EXPECT_FALSE(conn.Readable(50ms)) << "a cancelled reply was sent";
  cancelled.clear();
  EXPECT_TRUE(conn.RoundTrip("ListNodes")) << "a cancelled reply closed its connection";

  // Cancelled on the loop and handed to the pool: answered once, from the pool.
  master->set_mode(DeferringMaster::Mode::kCancelAndHandToPool);
  ASSERT_NO_FATAL_FAILURE(ExpectEachAnsweredOnceWith(conn, 10, 13, "answered in the pool"));
  EXPECT_EQ(master->calls.load(), 3 + 2 * 3);  // each handed-over call ran twice
  EXPECT_TRUE(conn.RoundTrip("ListNodes"));
}

TEST(RpcEventServerTest, RepliesCannotBeDeferredOnTheThreadedEngine) {
  auto master = std::make_shared<DeferringMaster>();
  auto processor = std::make_shared<SeqIdProcessor>(master);
  RpcServerOptions options{.host = "127.0.0.1", .port = 0};
  options.limits.engine = RpcEngine::kThreads;
  auto started = RpcServer::Start(processor, options);
  ASSERT_TRUE(started) << ToString(started.error());
  auto server = std::move(*started);
  DropDeferredOnExit drop_on_exit{*master};
  RawConnection conn(server->port());
  ASSERT_TRUE(conn.Send(Wire().Call("GetRole", 4).Stop().Framed()));
  auto reply = conn.ReadFrame(2s);
  ASSERT_TRUE(reply);
  EXPECT_EQ(DecodeGetRoleReply(*reply), std::make_pair(int32_t{4}, std::string("not deferred")));
  EXPECT_EQ(master->null_replies.load(), 1);
  // Outside any server, too.
  EXPECT_EQ(RpcDeferReply(), nullptr);
}

// What `send` writes through a WorkerServiceClient over a memory buffer.
std::string WorkerCallBytes(const std::function<void(rpc::WorkerServiceClient&)>& send) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  rpc::WorkerServiceClient client(
      std::make_shared<apache::thrift::protocol::TBinaryProtocol>(buffer));
  send(client);
  return buffer->getBufferAsString();
}

// Decodes a call `bytes` (WorkerCallBytes) with the generated reader into
// `args`; returns the call's name. Every byte must belong to the call.
template <typename Args>
std::string DecodeWithTheGeneratedReader(const std::string& bytes, Args& args) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
      reinterpret_cast<uint8_t*>(const_cast<char*>(bytes.data())),
      static_cast<uint32_t>(bytes.size()));
  apache::thrift::protocol::TBinaryProtocol in(buffer);
  std::string name;
  apache::thrift::protocol::TMessageType type;
  int32_t seqid = 0;
  in.readMessageBegin(name, type, seqid);
  args.read(&in);
  in.readMessageEnd();
  EXPECT_EQ(buffer->available_read(), 0u) << "bytes past the call";
  return name;
}

// The value goes last (fields 1 key, 3 config, 2 value), so that a worker
// knows where to store it before its bytes arrive; any Thrift reader takes
// fields in any order, so the generated one decodes the same call.
TEST(ValueCallsTest, PutAndUpsertFromAViewSendTheGeneratedCallWithTheValueLast) {
  rpc::ReplicateConfig config;
  config.with_soft_pin = true;
  config.preferred_node = "w2";
  config.preferred_tier = "dram";
  for (size_t size : {size_t{1}, size_t{4} << 10, size_t{100} << 10}) {
    const std::string key = "key-" + std::to_string(size);
    const std::string value = PatternOf(size, static_cast<int>(size % 97));
    for (bool upsert : {false, true}) {
      std::string ours =
          WorkerCallBytes([&](auto& c) { SendValueCall(c, upsert, key, value, config); });
      std::string generated = WorkerCallBytes([&](auto& c) {
        upsert ? c.send_Upsert(key, value, config) : c.send_Put(key, value, config);
      });
      EXPECT_EQ(ours.size(), generated.size()) << "the same fields, " << size << " bytes";
      EXPECT_TRUE(ours.ends_with(value + std::string(1, '\0')))
          << "the value, then the arguments' stop, end the call";
      rpc::WorkerService_Put_args args;
      EXPECT_EQ(DecodeWithTheGeneratedReader(ours, args), upsert ? "Upsert" : "Put");
      EXPECT_EQ(args.key, key);
      EXPECT_TRUE(args.value == value) << size;
      EXPECT_EQ(args.config, config);
    }
  }
}

TEST(ValueCallsTest, BatchPutAndBatchUpsertFromViewsSendTheGeneratedCallWithEachValueLast) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = true;
  config.preferred_tier = "ssd";
  // Values on both sides of the 4 KiB borrowed-write threshold, and a key
  // longer than the small-string buffer.
  std::vector<std::pair<std::string, std::string>> owned = {
      {"a", PatternOf(1, 1)},
      {"a-key-longer-than-sixteen-bytes", PatternOf(size_t{4} << 10, 2)},
      {"c", PatternOf(size_t{70} << 10, 3)}};
  std::vector<ValueView> views;
  std::vector<rpc::PutItem> items;
  for (const auto& [key, value] : owned) {
    views.push_back({key, value});
    rpc::PutItem item;
    item.key = key;
    item.value = value;
    item.config = config;
    items.push_back(item);
  }
  for (bool upsert : {false, true}) {
    std::string ours =
        WorkerCallBytes([&](auto& c) { SendBatchValueCall(c, upsert, views, config); });
    std::string generated = WorkerCallBytes(
        [&](auto& c) { upsert ? c.send_BatchUpsert(items) : c.send_BatchPut(items); });
    EXPECT_EQ(ours.size(), generated.size());
    // The last item's value, its stop, the list's end (no bytes) and the
    // arguments' stop.
    EXPECT_TRUE(ours.ends_with(owned.back().second + std::string(2, '\0')));
    rpc::WorkerService_BatchPut_args args;
    EXPECT_EQ(DecodeWithTheGeneratedReader(ours, args), upsert ? "BatchUpsert" : "BatchPut");
    EXPECT_EQ(args.items, items);
  }
  EXPECT_EQ(WorkerCallBytes([&](auto& c) { SendBatchValueCall(c, false, {}, config); }),
            WorkerCallBytes([&](auto& c) { c.send_BatchPut({}); }));
}

// A call as a worker receives it: its frame (as the generated client
// writes it, less the 4-byte header) decoded in place up to its arguments.
struct ReceivedCall {
  explicit ReceivedCall(std::string bytes)
      : frame(std::move(bytes)), input(std::make_shared<RpcFrameInput>()), in(input, input.get()) {
    input->Observe(reinterpret_cast<uint8_t*>(frame.data()), static_cast<uint32_t>(frame.size()));
    apache::thrift::protocol::TMessageType type;
    int32_t seqid = 0;
    in.readMessageBegin(name, type, seqid);
  }

  std::string frame;
  std::shared_ptr<RpcFrameInput> input;
  BoundedBinaryProtocol in;
  std::string name;
};

TEST(ValueCallsTest, APutReadFromItsFrameViewsTheValueWhereItArrived) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = true;
  config.preferred_tier = "ssd";
  for (bool upsert : {false, true}) {
    const std::string value = PatternOf(100u << 10, upsert ? 3 : 4);
    ReceivedCall call(WorkerCallBytes([&](auto& c) {
      upsert ? c.send_Upsert("k1", value, config) : c.send_Put("k1", value, config);
    }));
    EXPECT_EQ(call.name, upsert ? "Upsert" : "Put");
    const std::string& frame = call.frame;
    BoundedBinaryProtocol& in = call.in;
    const auto& input = call.input;

    ValueItem item;
    ReadValueCall(in, item);
    in.readMessageEnd();

    EXPECT_EQ(item.key, "k1");
    EXPECT_TRUE(item.value == value);
    EXPECT_GE(item.value.data(), frame.data()) << "a view of the frame, not a copy";
    EXPECT_LE(item.value.data() + item.value.size(), frame.data() + frame.size());
    EXPECT_TRUE(item.storage.empty());
    EXPECT_EQ(item.config, config);
    EXPECT_EQ(input->frame_bytes_left(), 0u) << "the whole call was read";
  }
}

TEST(ValueCallsTest, ABatchPutReadFromItsFrameViewsEveryValueInOrder) {
  std::vector<rpc::PutItem> items(3);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].key = "k" + std::to_string(i);
    items[i].value = PatternOf(i == 1 ? 0 : (5u << 10) * (i + 1), static_cast<int>(i));
    items[i].config.preferred_node = "w" + std::to_string(i);
  }
  for (bool upsert : {false, true}) {
    ReceivedCall call(WorkerCallBytes(
        [&](auto& c) { upsert ? c.send_BatchUpsert(items) : c.send_BatchPut(items); }));
    EXPECT_EQ(call.name, upsert ? "BatchUpsert" : "BatchPut");
    const std::string& frame = call.frame;
    BoundedBinaryProtocol& in = call.in;
    const auto& input = call.input;

    std::vector<ValueItem> read;
    ReadBatchValueCall(in, read);
    in.readMessageEnd();

    ASSERT_EQ(read.size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      EXPECT_EQ(read[i].key, items[i].key);
      EXPECT_TRUE(read[i].value == items[i].value) << i;
      EXPECT_EQ(read[i].config, items[i].config) << i;
      if (!read[i].value.empty()) {
        EXPECT_GE(read[i].value.data(), frame.data()) << i << " is a view of the frame";
        EXPECT_LE(read[i].value.data() + read[i].value.size(), frame.data() + frame.size());
      }
    }
    EXPECT_EQ(input->frame_bytes_left(), 0u) << "the whole call was read";
  }
}

// What the generated processor replies to Get when the handler fills
// `result`, as WorkerServiceProcessor::process_Get writes it.
std::string GeneratedGetReplyBytes(int32_t seqid, const rpc::GetResult& result) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol out(buffer);
  rpc::WorkerService_Get_result reply;
  reply.success = result;
  reply.__isset.success = true;
  out.writeMessageBegin("Get", apache::thrift::protocol::T_REPLY, seqid);
  reply.write(&out);
  out.writeMessageEnd();
  return buffer->getBufferAsString();
}

TEST(ValueCallsTest, AGetReplyFromAViewWritesExactlyTheGeneratedBytes) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4} << 10, size_t{100} << 10}) {
    rpc::GetResult result;
    result.code = size == 0 ? rpc::ErrorCode::NOT_OWNER : rpc::ErrorCode::OK;
    result.data = PatternOf(size, static_cast<int>(size % 89));
    result.total_size = static_cast<int64_t>(3 * size + 7);
    result.version = 42 + static_cast<int64_t>(size);
    if (size == 0) result.owner_hint = "worker-b";
    rpc::GetResult head = result;
    head.data = "not sent: the view is";

    auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
    apache::thrift::protocol::TBinaryProtocol out(buffer);
    WriteGetReply(out, 77, head, std::as_bytes(std::span(result.data)));

    EXPECT_EQ(buffer->getBufferAsString(), GeneratedGetReplyBytes(77, result))
        << "reply with " << size << " bytes";
  }
}

TEST(ValueCallsTest, ABatchGetReplyFromViewsWritesExactlyTheGeneratedBytes) {
  std::vector<rpc::GetResult> results(3);
  results[0].code = rpc::ErrorCode::OK;
  results[0].data = PatternOf(4096, 5);
  results[0].total_size = 4096;
  results[0].version = 9;
  results[1].code = rpc::ErrorCode::NOT_OWNER;
  results[1].owner_hint = "worker-c";
  results[2].code = rpc::ErrorCode::OK;
  results[2].total_size = 1 << 30;  // past the reply budget: no bytes
  results[2].version = 11;
  std::vector<std::span<const std::byte>> data;
  for (const auto& result : results) data.push_back(std::as_bytes(std::span(result.data)));

  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol out(buffer);
  WriteBatchGetReply(out, 5, results, data);

  auto expected = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol generated(expected);
  rpc::WorkerService_BatchGet_result reply;
  reply.success = results;
  reply.__isset.success = true;
  generated.writeMessageBegin("BatchGet", apache::thrift::protocol::T_REPLY, 5);
  reply.write(&generated);
  generated.writeMessageEnd();
  EXPECT_EQ(buffer->getBufferAsString(), expected->getBufferAsString());
}

TEST(RpcServerStartTest, RejectsBadLimitsAndUnreadableTlsFiles) {
  auto processor =
      std::make_shared<rpc::MasterServiceProcessor>(std::make_shared<rpc::MasterServiceNull>());
  auto zero = RpcServer::Start(processor, {.port = 0, .limits = {.max_connections = 0}});
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), ErrorCode::kInvalidParams);
  auto tls = RpcServer::Start(processor, {.port = 0,
                                          .tls = {.cert_file = "/nonexistent/c.pem",
                                                  .key_file = "/nonexistent/k.pem",
                                                  .ca_file = "/nonexistent/ca.pem"}});
  ASSERT_FALSE(tls);
  EXPECT_EQ(tls.error(), ErrorCode::kInvalidParams);
}

// ---- RpcChannel against a server whose replies break the limits ----

// Answers every request frame on 127.0.0.1 with reply(seqid of the request),
// one connection at a time, then waits for the next frame on it.
class FakeServer {
 public:
  using ReplyFn = std::function<std::string(int32_t seqid)>;

  explicit FakeServer(ReplyFn reply) : reply_(std::move(reply)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        listen(listen_fd_, 8) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }

  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  // Waits (bounded by stop_) until `fd` is readable.
  bool Readable(int fd) {
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) return true;
    }
    return false;
  }

  // Reads exactly `n` bytes; false on close or stop.
  bool ReadExactly(int fd, char* buf, size_t n) {
    while (n > 0) {
      if (!Readable(fd)) return false;
      ssize_t got = recv(fd, buf, n, 0);
      if (got <= 0) return false;
      buf += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }

  void Serve() {
    while (Readable(listen_fd_)) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char header[4];
      while (ReadExactly(fd, header, 4)) {
        std::string frame(static_cast<size_t>(ReadI32(std::string_view(header, 4), 0)), '\0');
        if (frame.size() > (1u << 20) || !ReadExactly(fd, frame.data(), frame.size())) break;
        ++requests_;
        // version word, method name, seqid
        int32_t seqid = ReadI32(frame, 8 + static_cast<size_t>(ReadI32(frame, 4)));
        std::string reply = reply_(seqid);
        send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      }
      close(fd);
    }
  }

  ReplyFn reply_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// GetLocation through an RpcChannel with short timeouts.
Result<rpc::LocationResult> GetLocationFrom(int port) {
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", port,
                                               {.connect_timeout_ms = 1000, .io_timeout_ms = 500});
  return channel.Call([](auto& c) {
    rpc::LocationResult r;
    c.GetLocation(r, "key");
    return r;
  });
}

// A GetLocation reply whose LocationResult is `body` (fields, then stop).
std::string LocationReply(int32_t seqid, const std::function<void(Wire&)>& body) {
  Wire w;
  w.Message(kReplyHeader, "GetLocation", seqid).Field(T_STRUCT, 0);
  body(w);
  return w.Stop().Stop().Framed();
}

// Expects GetLocation from `server` to fail with kRpcFail, and the peak RSS
// of this process (the client's) to grow by less than 64 MiB meanwhile.
void ExpectRpcFailWithoutAllocating(const FakeServer& server) {
  ResetPeakRss();
  const int64_t peak_before = PeakRssKiB();
  auto r = GetLocationFrom(server.port());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), ErrorCode::kRpcFail);
  EXPECT_LT(PeakRssKiB() - peak_before, 64 * 1024) << "KiB of peak RSS grew";
}

TEST(RpcChannelLimitsTest, WellFormedReplyFromTheFakeServerDecodes) {
  // Guards the fake server itself: a good reply must come through.
  FakeServer server([](int32_t seqid) {
    return LocationReply(seqid, [](Wire& w) {
      w.Field(T_I32, 1).I32(0).Field(T_STRING, 2).Str("w1").Field(T_I32, 4).I32(7001);
    });
  });
  auto r = GetLocationFrom(server.port());
  ASSERT_TRUE(r) << ToString(r.error());
  EXPECT_EQ(r->node_id, "w1");
  EXPECT_EQ(r->port, 7001);
}

TEST(RpcChannelLimitsTest, ReplyDeclaringA2GiBStringFailsWithoutAllocating) {
  FakeServer server([](int32_t seqid) {
    return LocationReply(seqid, [](Wire& w) {
      w.Field(T_I32, 1).I32(0).Field(T_STRING, 2).I32(0x7FFFFFF0).Raw("w1");
    });
  });
  ASSERT_NO_FATAL_FAILURE(ExpectRpcFailWithoutAllocating(server));
  EXPECT_EQ(server.requests(), 1);  // a fresh connection's failure is not retried
}

TEST(RpcChannelLimitsTest, ReplyFrameOverTheLimitFails) {
  FakeServer server([](int32_t) { return Frame("xxxx", kRpcMaxFrameBytes + 1); });
  ExpectRpcFailWithoutAllocating(server);
}

TEST(RpcChannelLimitsTest, UnversionedOrGarbageReplyFails) {
  FakeServer server(
      [](int32_t seqid) { return Wire().Str("GetLocation").U8(2).I32(seqid).Stop().Framed(); });
  auto r = GetLocationFrom(server.port());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), ErrorCode::kRpcFail);
}

TEST(RpcChannelLimitsTest, ReplyThatStopsHalfWayTimesOut) {
  // Declares 1 KiB, sends 10 bytes and keeps the connection open.
  FakeServer server([](int32_t) { return Frame("ten bytes!", 1024); });
  const auto start = Clock::now();
  auto r = GetLocationFrom(server.port());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), ErrorCode::kRpcTimeout);
  EXPECT_LT(Clock::now() - start, 5s);
}

// Replies larger than 64 KiB are decoded as they arrive, their values read
// straight into their strings (BoundedFramedTransport::LargeFrames).

TEST(RpcChannelLimitsTest, ALargeReplyWithBytesPastItsMessageLeavesTheNextReplyIntact) {
  const std::string node_id = PatternOf(300u << 10, 9);
  FakeServer server([&](int32_t seqid) {
    Wire w;
    w.Message(kReplyHeader, "GetLocation", seqid).Field(T_STRUCT, 0);
    w.Field(T_I32, 1).I32(0).Field(T_STRING, 2).Str(node_id).Field(T_I32, 4).I32(7001);
    // Undecoded bytes inside the frame, after the message: dropped, not
    // taken for the start of the next reply.
    return w.Stop().Stop().Raw(std::string(100u << 10, 'p')).Framed();
  });
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", server.port(),
                                               {.connect_timeout_ms = 1000, .io_timeout_ms = 2000});
  for (int call = 0; call < 3; ++call) {
    auto r = channel.Call([](auto& c) {
      rpc::LocationResult result;
      c.GetLocation(result, "key");
      return result;
    });
    ASSERT_TRUE(r) << "call " << call << ": " << ToString(r.error());
    EXPECT_TRUE(r->node_id == node_id) << "call " << call;
    EXPECT_EQ(r->port, 7001) << "call " << call;
  }
  EXPECT_EQ(server.requests(), 3) << "one connection served every call";
}

// A reply over 64 KiB is decoded as it arrives: what came with its header
// buffered (16 KiB on a fresh connection, 4 KiB after a large reply), then
// strings that reach far enough past the buffer straight from the socket,
// the rest through the buffer. Strings on either side of each of those
// lines, after a first one that moves where they start, all arrive exact,
// in a connection's first reply and in its second.
TEST(RpcChannelLimitsTest, StringsAroundTheDecodedReplysThresholdsArriveExact) {
  constexpr size_t kKiB = 1024;
  for (size_t host_size : {size_t{10}, 3 * kKiB + 900, 4 * kKiB, 15 * kKiB + 900, 40 * kKiB}) {
    for (size_t id_size : {16 * kKiB - 64, 16 * kKiB, 16 * kKiB + 64, 48 * kKiB, 64 * kKiB - 1,
                           64 * kKiB, 64 * kKiB + 1, 200 * kKiB}) {
      const std::string host = PatternOf(host_size, 3);
      const std::string node_id = PatternOf(id_size, 4);
      FakeServer server([&](int32_t seqid) {
        Wire w;
        w.Message(kReplyHeader, "GetLocation", seqid).Field(T_STRUCT, 0);
        w.Field(T_I32, 1).I32(0).Field(T_STRING, 3).Str(host).Field(T_STRING, 2).Str(node_id);
        w.Field(T_I32, 4).I32(7002).Stop().Stop();
        // Past 64 KiB in all, so that the reply is decoded as it arrives.
        return w.Raw(std::string(70 * kKiB, 'p')).Framed();
      });
      RpcChannel<rpc::MasterServiceClient> channel(
          "127.0.0.1", server.port(), {.connect_timeout_ms = 1000, .io_timeout_ms = 2000});
      for (int call = 0; call < 2; ++call) {
        auto r = channel.Call([](auto& c) {
          rpc::LocationResult result;
          c.GetLocation(result, "key");
          return result;
        });
        ASSERT_TRUE(r) << host_size << "/" << id_size << ": " << ToString(r.error());
        EXPECT_TRUE(r->host == host) << host_size << "/" << id_size;
        EXPECT_TRUE(r->node_id == node_id) << host_size << "/" << id_size;
        EXPECT_EQ(r->port, 7002) << host_size << "/" << id_size;
      }
    }
  }
}

TEST(RpcChannelLimitsTest, ALargeReplyThatStopsInsideItsValueTimesOut) {
  FakeServer server([](int32_t seqid) {
    std::string whole = LocationReply(seqid, [](Wire& w) {
      w.Field(T_I32, 1).I32(0).Field(T_STRING, 2).Str(std::string(600u << 10, 'v'));
    });
    return whole.substr(0, 200u << 10);  // the rest never comes
  });
  const auto start = Clock::now();
  auto r = GetLocationFrom(server.port());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), ErrorCode::kRpcTimeout);
  EXPECT_LT(Clock::now() - start, 5s);
}

// ---- Flag checks ----

// A file in a fresh temp dir, removed with it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rpc-transport-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

TEST(RpcSettingsTest, ServerLimitsMustBePositive) {
  std::string why;
  EXPECT_TRUE(ValidateRpcServerLimits({}, &why));
  EXPECT_TRUE(ValidateRpcServerLimits(
      {.max_connections = 1, .idle_timeout_ms = 1, .read_timeout_ms = 1}, nullptr));
  EXPECT_TRUE(ValidateRpcServerLimits({.poll_us = 0}, nullptr));  // off
  EXPECT_TRUE(ValidateRpcServerLimits({.poll_us = kMaxRpcPollUs}, nullptr));
  struct Case {
    RpcServerLimits limits;
    std::string flag;
  };
  for (const auto& c : {Case{{.max_connections = 0}, "--max-connections"},
                        Case{{.max_connections = -5}, "--max-connections"},
                        Case{{.idle_timeout_ms = 0}, "--rpc-idle-timeout-ms"},
                        Case{{.read_timeout_ms = -1}, "--rpc-read-timeout-ms"},
                        Case{{.poll_us = -1}, "--rpc-poll-us"},
                        Case{{.poll_us = kMaxRpcPollUs + 1}, "--rpc-poll-us"}}) {
    why.clear();
    auto r = ValidateRpcServerLimits(c.limits, &why);
    ASSERT_FALSE(r) << c.flag;
    EXPECT_EQ(r.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(why.find(c.flag), std::string::npos) << why;
    EXPECT_FALSE(ValidateRpcServerLimits(c.limits, nullptr));  // message optional
  }
}

TEST(RpcSettingsTest, TlsNeedsAllThreeReadableFilesOrNone) {
  TempDir dir;
  const std::string cert = dir.File("c.pem", "cert");
  const std::string key = dir.File("k.pem", "key");
  const std::string ca = dir.File("ca.pem", "ca");
  std::string why;
  EXPECT_TRUE(ValidateTlsSettings({}, &why));
  EXPECT_FALSE(TlsSettings{}.enabled());
  EXPECT_TRUE(ValidateTlsSettings({cert, key, ca}, &why)) << why;

  for (const TlsSettings& partial : {TlsSettings{cert, "", ""}, TlsSettings{"", key, ""},
                                     TlsSettings{"", "", ca}, TlsSettings{cert, key, ""}}) {
    EXPECT_TRUE(partial.enabled());
    why.clear();
    auto r = ValidateTlsSettings(partial, &why);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(why.find("all three"), std::string::npos) << why;
  }
  why.clear();
  auto missing = ValidateTlsSettings({cert, key, "/nonexistent/ca.pem"}, &why);
  ASSERT_FALSE(missing);
  EXPECT_NE(why.find("/nonexistent/ca.pem"), std::string::npos) << why;
  EXPECT_FALSE(ValidateTlsSettings({cert, key, "/nonexistent/ca.pem"}, nullptr));
}

TEST(RpcSettingsTest, TlsContextRefusesFilesThatAreNotPem) {
  TempDir dir;
  TlsSettings garbage{dir.File("c.pem", "not a certificate"), dir.File("k.pem", "not a key"),
                      dir.File("ca.pem", "not a CA")};
  for (bool server : {true, false}) {
    std::string why;
    auto context = RpcTlsContext::Create(garbage, server, &why);
    ASSERT_FALSE(context);
    EXPECT_EQ(context.error(), ErrorCode::kInvalidParams);
    EXPECT_FALSE(why.empty());
  }
}

}  // namespace
}  // namespace mooncake
