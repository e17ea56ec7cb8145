// No server crashes on input: garbage, truncated and oversized Thrift frames
// sent to a master and a worker close only that connection.

#include <gtest/gtest.h>

#include <chrono>
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

TEST(MalformedInputTest, GarbageFramesNeitherCrashNorChangeAnything) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 16 << 20, .ssd = 0}));
  auto client = cluster.NewClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("before", "intact", {.preferred_node = "w1"})));

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

}  // namespace
}  // namespace mooncake::testing
