// Master addresses as the worker and the shard list name them: an IPv6 host
// is written "[::1]:PORT", and a master listening on ::1 must be reached at
// it, through --master-shards and through a worker's --master alike.
//
// The master is an in-process RpcServer on ::1, port 0 (skipped where the
// machine has no IPv6 loopback); every call is bounded by the endpoints'
// timeouts.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "mooncake_rpc/MasterService.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shards.h"
#include "thrift/rpc_server.h"
#include "worker/worker_config.h"

namespace mooncake {
namespace {

bool HasIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return bound;
}

// A master that answers ListNodes with one node, so a reply is told apart
// from a default.
class OneNodeMaster : public rpc::MasterServiceNull {
 public:
  void ListNodes(std::vector<rpc::NodeInfo>& nodes) override {
    nodes.resize(1);
    nodes[0].node_id = "answered";
  }
};

class MasterAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
    auto processor =
        std::make_shared<rpc::MasterServiceProcessor>(std::make_shared<OneNodeMaster>());
    auto started = RpcServer::Start(processor, RpcServerOptions{.host = "::1", .port = 0});
    ASSERT_TRUE(started) << ToString(started.error());
    server_ = std::move(*started);
  }

  std::string Bracketed() const { return "[::1]:" + std::to_string(server_->port()); }

  // Whether a ListNodes at `endpoint` gets the master's reply (a master
  // not reached fails it once the endpoint's leader wait is over).
  static ::testing::AssertionResult Answers(MasterEndpoint& endpoint) {
    auto nodes = endpoint.Call([](rpc::MasterServiceClient& client) {
      std::vector<rpc::NodeInfo> out;
      client.ListNodes(out);
      return out;
    });
    if (!nodes) return ::testing::AssertionFailure() << ToString(nodes.error());
    if (nodes->size() != 1 || (*nodes)[0].node_id != "answered") {
      return ::testing::AssertionFailure() << "not the master's reply";
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<RpcServer> server_;
};

TEST_F(MasterAddressTest, AShardNamedWithABracketedIpv6HostIsReached) {
  auto table = ParseMasterShards(Bracketed());
  ASSERT_TRUE(table.has_value());
  MasterShards shards(std::move(*table), RpcOptions{.connect_timeout_ms = 1000});
  EXPECT_EQ(shards.Shard(0).target().host, "::1");
  EXPECT_EQ(shards.Shard(0).target().port, server_->port());
  EXPECT_TRUE(Answers(shards.Shard(0)));
}

TEST_F(MasterAddressTest, AWorkersBracketedIpv6MasterIsReached) {
  const std::string master = Bracketed();
  std::vector<const char*> argv = {"mooncake-worker", "--master", master.c_str()};
  std::string message;
  auto config = ParseWorkerConfig(static_cast<int>(argv.size()), argv.data(), &message);
  ASSERT_TRUE(config) << message;
  // As the worker builds its master target (worker/worker_server.cc).
  MasterEndpoint endpoint(
      MasterTarget{
          .host = config->master_host(), .port = config->master_port(), .leader_wait_ms = 3000},
      RpcOptions{.connect_timeout_ms = 1000});
  EXPECT_EQ(endpoint.target().Describe(), master);
  EXPECT_TRUE(Answers(endpoint));
}

TEST(MasterAddressSplitTest, BracketsAreTakenOffAndPutBackOnlyAroundIpv6Hosts) {
  using Split = std::optional<std::pair<std::string, int>>;
  EXPECT_EQ(SplitMasterAddress("[::1]:7000"), (Split{{"::1", 7000}}));
  EXPECT_EQ(SplitMasterAddress("[fe80::1%eth0]:1"), (Split{{"fe80::1%eth0", 1}}));
  EXPECT_EQ(SplitMasterAddress("::1:7000"), (Split{{"::1", 7000}}));  // as before
  EXPECT_EQ(SplitMasterAddress("master-0:50051"), (Split{{"master-0", 50051}}));
  for (const char* bad :
       {"[::1:7000", "::1]:7000", "[]:7000", "[::1]", "[::1]:0", "[::1]:65536", ":7000", "host"}) {
    EXPECT_EQ(SplitMasterAddress(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(JoinMasterAddress("::1", 7000), "[::1]:7000");
  EXPECT_EQ(JoinMasterAddress("10.0.0.1", 7000), "10.0.0.1:7000");
}

}  // namespace
}  // namespace mooncake
