// No server crashes on input: garbage, truncated and oversized Thrift frames
// sent to a master and a worker close only that connection.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

// Sends `bytes` to 127.0.0.1:port, reads whatever comes back until the peer
// closes or nothing arrives for 2 s, and closes. Returns false if it could
// not connect.
bool SendRaw(int port, const std::string& bytes) {
  RawConnection conn(port);
  if (!conn.connected()) return false;
  conn.Send(bytes);
  conn.ShutdownWrite();
  conn.ReadUntilClosed(std::chrono::seconds(2));
  return true;
}

// A master and one worker (16 MiB DRAM, no SSD), a client, and one object
// ("before" = "intact") that no attack may change.
class MalformedInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster.StartMaster());
    ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 16 << 20, .ssd = 0}));
    client = cluster.NewClient();
    ASSERT_TRUE(client);
    ASSERT_TRUE(IsOk(client->Put("before", "intact", {.preferred_node = "w1"})));
  }

  TestCluster cluster;
  std::unique_ptr<Client> client;
};

TEST_F(MalformedInputTest, GarbageFramesNeitherCrashNorChangeAnything) {
  const std::string attacks[] = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",  // wrong protocol
      Frame("", 0),                         // empty frame
      Frame(std::string(64, '\xff'), 64),   // garbage message
      Frame("\x80\x01\x00\x01", 1000),      // truncated frame
      Frame("", 0x7fffffff),                // oversized frame header
      Frame(std::string("\x80\x01\x00\x01\x00\x00\x00\x03Get\x00\x00\x00\x01", 15) +
                std::string(32, '\x0b'),
            47),  // a call with junk arguments
  };
  for (int port : {cluster.master_port(), cluster.worker_port("w1")}) {
    for (const std::string& attack : attacks) ASSERT_TRUE(SendRaw(port, attack)) << port;
  }

  // Both processes still serve, and nothing changed.
  EXPECT_TRUE(cluster.IsRunning("master"));
  EXPECT_TRUE(cluster.IsRunning("w1"));
  auto value = client->Get("before");
  ASSERT_TRUE(IsOk(value));
  EXPECT_EQ(value->data, "intact");
  auto stats = client->Stats("w1");
  ASSERT_TRUE(IsOk(stats));
  EXPECT_EQ(stats->tiers.at(0).usage.objects, 1u);
  ASSERT_TRUE(IsOk(client->Put("after", "still works")));
}

// A Put's value larger than what comes with its frame's header goes from
// the socket straight into the worker's DRAM tier. One cut short inside the
// value leaves no object, takes no space and keeps the key free; the same
// call sent whole, in either field order, is stored as sent.
TEST_F(MalformedInputTest, APutCutShortInsideItsValueLeavesNeitherObjectNorSpace) {
  auto before = client->Stats("w1");
  ASSERT_TRUE(IsOk(before));
  const int port = cluster.worker_port("w1");

  const std::string value = PatternBytes(1, 1 << 20);
  // Key, config, value: the order our clients send, which lets the worker
  // place the value as it arrives.
  const std::string call = Wire()
                               .Call("Put")
                               .Field(kString, 1)
                               .Str("cut")
                               .Field(kStruct, 3)
                               .Stop()
                               .Field(kString, 2)
                               .Str(value)
                               .Stop()
                               .Framed();
  {
    // The worker closes the connection only after the put is undone (the
    // revoke runs as the cut frame's error unwinds): wait for the close, as
    // a busy machine may take a while to run the worker's thread.
    RawConnection cut(port);
    ASSERT_TRUE(cut.connected());
    cut.Send(call.substr(0, call.size() / 2));
    cut.ShutdownWrite();
    ASSERT_TRUE(cut.ReadUntilClosed(std::chrono::seconds(20)))
        << "the worker kept a connection whose frame was cut short";
  }

  EXPECT_TRUE(cluster.IsRunning("w1"));
  EXPECT_EQ(client->Get("cut").error(), ErrorCode::kObjectNotFound);
  auto after = client->Stats("w1");
  ASSERT_TRUE(IsOk(after));
  EXPECT_EQ(after->tiers.at(0).usage.objects, before->tiers.at(0).usage.objects);
  EXPECT_EQ(after->tiers.at(0).usage.used, before->tiers.at(0).usage.used) << "space given back";
  ASSERT_TRUE(IsOk(client->Put("cut", value)));
  auto stored = client->Get("cut");
  ASSERT_TRUE(IsOk(stored));
  EXPECT_TRUE(stored->data == value);

  // The generated client's order (value before config) cannot be placed;
  // it is read whole and stored the ordinary way.
  RawConnection generated(port);
  ASSERT_TRUE(generated.Send(Wire()
                                 .Call("Put")
                                 .Field(kString, 1)
                                 .Str("generated")
                                 .Field(kString, 2)
                                 .Str(value)
                                 .Field(kStruct, 3)
                                 .Stop()
                                 .Stop()
                                 .Framed()));
  ASSERT_TRUE(generated.ReadFrame()) << "no reply to a whole Put";
  auto read = client->Get("generated");
  ASSERT_TRUE(IsOk(read));
  EXPECT_TRUE(read->data == value);
}

}  // namespace
}  // namespace mooncake::testing
