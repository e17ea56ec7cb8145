// Polling for the next RPC frame (RpcReadTimeouts::poll, --rpc-poll-us):
// a BoundedFramedTransport over one end of a loopback TCP connection, the
// test writing frames into the other end, with the spare-CPU answer forced
// (common/spare_cpu.h) so that each way through the wait is taken on
// purpose. Then the flag's path from RpcServerLimits into a served
// connection.
//
// Every wait is bounded.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "common/spare_cpu.h"
#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_server.h"
#include "thrift/rpc_transport.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;
using Clock = std::chrono::steady_clock;

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The difference of two snapshots.
RpcPollCounts Since(const RpcPollCounts& before) {
  RpcPollCounts now = ReadRpcPollCounts();
  return {.data = now.data - before.data,
          .expired = now.expired - before.expired,
          .busy = now.busy - before.busy};
}

// The counts of a wait that did not poll, or stopped polling, for want of a
// spare CPU.
void ExpectBusyOnce(const RpcPollCounts& counted) {
  EXPECT_EQ(counted.busy, 1u);
  EXPECT_EQ(counted.data + counted.expired, 0u);
}

// A frame as the wire carries it: its length (big-endian), then its bytes.
std::string Framed(const std::string& payload) {
  uint32_t length = htonl(static_cast<uint32_t>(payload.size()));
  std::string frame(reinterpret_cast<const char*>(&length), sizeof(length));
  return frame + payload;
}

// Both ends of one loopback TCP connection: `reader` read through a
// BoundedFramedTransport polling up to `poll`, `writer` a raw socket.
class PollTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(listener, 1), 0);
    ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length), 0);
    writer_ = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(writer_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    reader_fd_ = accept(listener, nullptr, nullptr);
    close(listener);
    ASSERT_GE(reader_fd_, 0);
  }

  void TearDown() override {
    ForceSpareCpuForTesting(std::nullopt);
    if (writer_ >= 0) close(writer_);
  }

  // The reading transport, which owns the reader's socket from now on.
  std::shared_ptr<BoundedFramedTransport> Reader(std::chrono::microseconds poll) {
    return std::make_shared<BoundedFramedTransport>(
        std::make_shared<TSocket>(reader_fd_),
        RpcReadTimeouts{.idle = 10s, .frame = 10s, .poll = poll});
  }

  bool Write(const std::string& bytes) {
    return send(writer_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  void CloseWriter() {
    close(writer_);
    writer_ = -1;
  }

  // Sends `payload` as a frame, checks that `got` reads it, and returns the
  // poll counts since `before`.
  RpcPollCounts SendAndRead(std::future<std::string>& got, const std::string& payload,
                            const RpcPollCounts& before) {
    EXPECT_TRUE(Write(Framed(payload)));
    if (got.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << "the reader did not get the frame";
      return Since(before);
    }
    EXPECT_EQ(got.get(), payload);
    return Since(before);
  }

  // Reads one frame's `size` bytes on another thread.
  static std::future<std::string> ReadAsync(std::shared_ptr<BoundedFramedTransport> reader,
                                            size_t size) {
    return std::async(std::launch::async, [reader, size] {
      std::string got(size, '\0');
      auto* bytes = reinterpret_cast<uint8_t*>(got.data());
      // In two pieces, as a protocol reads: Thrift checks the read that
      // starts a frame against what the last frame's reads left of its
      // size, which one read of a whole frame would drain.
      reader->readAll(bytes, 1);
      reader->readAll(bytes + 1, static_cast<uint32_t>(size - 1));
      reader->readEnd();
      return got;
    });
  }

  int writer_ = -1;
  int reader_fd_ = -1;
};

TEST_F(PollTest, AFrameThatComesWhileTheReaderPollsIsReadWhole) {
  ForceSpareCpuForTesting(true);
  const RpcPollCounts before = ReadRpcPollCounts();
  // The budget outlasts the test: the frame can only come through the poll.
  auto got = ReadAsync(Reader(60s), 11);
  std::this_thread::sleep_for(20ms);  // either order reads the same way
  ASSERT_TRUE(Write(Framed("hello world")));
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(got.get(), "hello world");
  RpcPollCounts counted = Since(before);
  EXPECT_EQ(counted.data, 1u);
  EXPECT_EQ(counted.expired, 0u);
  EXPECT_EQ(counted.busy, 0u);
}

TEST_F(PollTest, PipelinedFramesAfterAPolledOneAreReadInOrder) {
  ForceSpareCpuForTesting(true);
  auto reader = Reader(60s);
  // Three frames in one write: the poll's read takes them all at once, and
  // the later two must come from what it read ahead.
  ASSERT_TRUE(Write(Framed("first") + Framed("second") + Framed("third")));
  for (std::string expected : {"first", "second", "third"}) {
    auto got = ReadAsync(reader, expected.size());
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(got.get(), expected);
  }
  // And the poll took them out of the socket: the next frame is the next.
  ASSERT_TRUE(Write(Framed("fourth")));
  auto got = ReadAsync(reader, 6);
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(got.get(), "fourth");
}

TEST_F(PollTest, WhenThePollRunsOutTheReaderSleepsAndStillGetsTheFrame) {
  ForceSpareCpuForTesting(true);
  const RpcPollCounts before = ReadRpcPollCounts();
  auto got = ReadAsync(Reader(2ms), 5);
  // Forced order: the frame is sent only once the poll has given up.
  ASSERT_TRUE(Eventually([&] { return Since(before).expired == 1; }));
  RpcPollCounts counted = SendAndRead(got, "later", before);
  EXPECT_EQ(counted.expired, 1u);
  EXPECT_EQ(counted.data, 0u);
}

TEST_F(PollTest, WithoutASpareCpuTheReaderDoesNotPoll) {
  ForceSpareCpuForTesting(false);
  const RpcPollCounts before = ReadRpcPollCounts();
  auto got = ReadAsync(Reader(60s), 4);
  ASSERT_TRUE(Eventually([&] { return Since(before).busy == 1; }));
  ExpectBusyOnce(SendAndRead(got, "busy", before));
}

TEST_F(PollTest, APollStopsOnceNoCpuIsSpare) {
  ForceSpareCpuForTesting(true);
  const RpcPollCounts before = ReadRpcPollCounts();
  // A budget that outlasts the test: only losing the spare CPU ends it.
  auto got = ReadAsync(Reader(60s), 5);
  std::this_thread::sleep_for(20ms);  // the reader is polling by now
  ForceSpareCpuForTesting(false);
  EXPECT_TRUE(Eventually([&] { return Since(before).busy == 1; }, 2s));
  // The reader sleeps in recv now, and is woken by the frame (sent in any
  // case, so that a reader still polling ends too).
  ExpectBusyOnce(SendAndRead(got, "queue", before));
}

TEST_F(PollTest, ABudgetOfZeroNeverPolls) {
  ForceSpareCpuForTesting(true);
  const RpcPollCounts before = ReadRpcPollCounts();
  auto got = ReadAsync(Reader(0us), 3);
  ASSERT_TRUE(Write(Framed("off")));
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(got.get(), "off");
  RpcPollCounts counted = Since(before);
  EXPECT_EQ(counted.data + counted.expired + counted.busy, 0u);
}

TEST_F(PollTest, APeerClosingWhileTheReaderPollsEndsTheReadAtOnce) {
  ForceSpareCpuForTesting(true);
  const RpcPollCounts before = ReadRpcPollCounts();
  auto got = ReadAsync(Reader(60s), 1);
  CloseWriter();
  // Not after the 60 s budget: the close ends the poll.
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  EXPECT_THROW(got.get(), TTransportException);
  EXPECT_EQ(Since(before).data, 1u);
}

TEST_F(PollTest, APeerClosingInsideAPolledHeaderIsATruncatedFrame) {
  ForceSpareCpuForTesting(true);
  auto got = ReadAsync(Reader(60s), 1);
  ASSERT_TRUE(Write(std::string("\0\0", 2)));  // half a header, then gone
  CloseWriter();
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
  try {
    got.get();
    FAIL() << "a truncated header was read as a frame";
  } catch (const std::exception& e) {
    EXPECT_EQ(ClassifyRpcException(e), RpcFault::kTruncatedFrame) << e.what();
  }
}

// --rpc-poll-us reaches the connections a server serves: with it the
// server's thread polls for the next request; with 0 nobody polls (the
// client side polls nothing either, so any count is the server's).
TEST(RpcServerPollTest, TheServersBudgetReachesItsConnections) {
  ForceSpareCpuForTesting(true);
  for (int poll_us : {0, 500}) {
    auto started = RpcServer::Start(
        std::make_shared<rpc::MasterServiceProcessor>(std::make_shared<rpc::MasterServiceNull>()),
        {.host = "127.0.0.1",
         .port = 0,
         .limits = {.poll_us = poll_us, .engine = RpcEngine::kThreads}});
    ASSERT_TRUE(started) << ToString(started.error());
    const RpcPollCounts before = ReadRpcPollCounts();
    {
      RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", (*started)->port(),
                                                   RpcOptions{.poll_us = 0});
      for (int i = 0; i < 3; ++i) {
        auto listed = channel.Call([](rpc::MasterServiceClient& c) {
          std::vector<rpc::NodeInfo> nodes;
          c.ListNodes(nodes);
          return nodes.size();
        });
        ASSERT_TRUE(listed) << poll_us;
      }
    }
    // Each of the three requests, and the close after them, ends a wait.
    if (poll_us == 0) {
      RpcPollCounts counted = Since(before);
      EXPECT_EQ(counted.data + counted.expired + counted.busy, 0u);
    } else {
      EXPECT_TRUE(Eventually([&] {
        RpcPollCounts counted = Since(before);
        return counted.data + counted.expired >= 4;
      })) << Since(before).data
          << " " << Since(before).expired;
      EXPECT_EQ(Since(before).busy, 0u);
      EXPECT_EQ((*started)->stats().polls.data, ReadRpcPollCounts().data);
    }
    (*started)->Stop();
  }
  ForceSpareCpuForTesting(std::nullopt);
}

}  // namespace
}  // namespace mooncake
