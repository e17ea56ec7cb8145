// The etcd v3 JSON-gateway encoding (common/etcd_client.h) and the pieces of
// master HA that need no server: endpoint lists, the role gate, NOT_LEADER
// detection in master replies, and the HA flags.

#include "common/etcd_client.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_args.h"
#include "master/leader_election.h"
#include "master/master_config.h"
#include "thrift/master_endpoint.h"
#include "worker/worker_config.h"

namespace mooncake {
namespace {

using nlohmann::json;
namespace ej = etcd_json;

TEST(EtcdJsonTest, Base64RoundTripsEveryLengthAndByte) {
  EXPECT_EQ(ej::Base64Encode(""), "");
  EXPECT_EQ(ej::Base64Encode("f"), "Zg==");
  EXPECT_EQ(ej::Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(ej::Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(ej::Base64Encode("/mooncake/c/leader"), "L21vb25jYWtlL2MvbGVhZGVy");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    auto decoded = ej::Base64Decode(ej::Base64Encode(all.substr(0, n)));
    ASSERT_TRUE(decoded.has_value()) << n;
    EXPECT_EQ(*decoded, all.substr(0, n));
  }
}

TEST(EtcdJsonTest, Base64RejectsMalformedText) {
  EXPECT_FALSE(ej::Base64Decode("Zg=").has_value());       // not a multiple of 4
  EXPECT_FALSE(ej::Base64Decode("Z!==").has_value());      // outside the alphabet
  EXPECT_FALSE(ej::Base64Decode("Z=g=").has_value());      // data after padding
  EXPECT_FALSE(ej::Base64Decode("Zg==Zg==").has_value());  // padding mid-text
}

TEST(EtcdJsonTest, PrefixRangeEndIncrementsTheLastByteThatCan) {
  EXPECT_EQ(ej::PrefixRangeEnd("/mooncake/"), "/mooncake0");
  EXPECT_EQ(ej::PrefixRangeEnd("a"), "b");
  EXPECT_EQ(ej::PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(ej::PrefixRangeEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(ej::PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(EtcdJsonTest, CreateIfAbsentIsOneTransactionOnCreateRevisionZero) {
  json body = json::parse(ej::CreateIfAbsentRequest("/k", "127.0.0.1:5", 42));
  ASSERT_EQ(body["compare"].size(), 1u);
  EXPECT_EQ(body["compare"][0]["target"], "CREATE");
  EXPECT_EQ(body["compare"][0]["result"], "EQUAL");
  EXPECT_EQ(body["compare"][0]["create_revision"], "0");
  EXPECT_EQ(body["compare"][0]["key"], ej::Base64Encode("/k"));
  const json& put = body["success"][0]["request_put"];
  EXPECT_EQ(put["key"], ej::Base64Encode("/k"));
  EXPECT_EQ(put["value"], ej::Base64Encode("127.0.0.1:5"));
  EXPECT_EQ(put["lease"], "42");  // int64 as a JSON string, as the gateway expects
  EXPECT_EQ(body["failure"][0]["request_range"]["key"], ej::Base64Encode("/k"));
}

TEST(EtcdJsonTest, DeleteIfLeaseComparesTheLease) {
  json body = json::parse(ej::DeleteIfLeaseRequest("/k", 7));
  EXPECT_EQ(body["compare"][0]["target"], "LEASE");
  EXPECT_EQ(body["compare"][0]["lease"], "7");
  EXPECT_EQ(body["success"][0]["request_delete_range"]["key"], ej::Base64Encode("/k"));
}

TEST(EtcdJsonTest, ParsesResponsesAsEtcd34WritesThem) {
  // Bodies as etcd 3.4.23's gateway answered them.
  int64_t ttl = 0;
  auto lease = ej::ParseGrantResponse(
      R"({"header":{"revision":"1"},"ID":"4111120205424556550","TTL":"2"})", &ttl);
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(*lease, 4111120205424556550);
  EXPECT_EQ(ttl, 2);

  auto alive = ej::ParseKeepAliveResponse(R"({"result":{"ID":"5","TTL":"3"}})"
                                          "\n");
  ASSERT_TRUE(alive.has_value());
  EXPECT_EQ(*alive, 3);
  auto gone = ej::ParseKeepAliveResponse(R"({"result":{"header":{},"ID":"12345"}})");
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(*gone, 0);  // no TTL: the lease is gone

  auto range = ej::ParseRangeResponse(
      R"({"kvs":[{"key":"L21vb25jYWtlL2MvbGVhZGVy","create_revision":"2","mod_revision":"2",)"
      R"("version":"1","value":"MTI3LjAuMC4xOjU=","lease":"41"}],"count":"1"})");
  ASSERT_TRUE(range.has_value() && range->has_value());
  EXPECT_EQ((*range)->key, "/mooncake/c/leader");
  EXPECT_EQ((*range)->value, "127.0.0.1:5");
  EXPECT_EQ((*range)->lease, 41);
  EXPECT_EQ((*range)->create_revision, 2);
  auto empty = ej::ParseRangeResponse(R"({"header":{"revision":"3"}})");
  ASSERT_TRUE(empty.has_value());
  EXPECT_FALSE(empty->has_value());

  auto won = ej::ParseCreateIfAbsentResponse(
      R"({"succeeded":true,"responses":[{"response_put":{"header":{}}}]})");
  ASSERT_TRUE(won.has_value());
  EXPECT_TRUE(won->created);
  // proto3 JSON leaves out a false "succeeded".
  auto lost = ej::ParseCreateIfAbsentResponse(
      R"({"responses":[{"response_range":{"kvs":[{"key":"L2s=","value":"YTox","lease":"9"}]}}]})");
  ASSERT_TRUE(lost.has_value());
  EXPECT_FALSE(lost->created);
  ASSERT_TRUE(lost->existing.has_value());
  EXPECT_EQ(lost->existing->value, "a:1");

  EXPECT_FALSE(ej::ParseRangeResponse("not json").has_value());
  EXPECT_FALSE(ej::ParseGrantResponse("{}", nullptr).has_value());
}

TEST(EtcdEndpointsTest, ParsesCommaSeparatedHttpEndpoints) {
  auto two = ParseEtcdEndpoints("http://10.0.0.1:2379, 10.0.0.2:2379");
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(*two, (std::vector<std::string>{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}));
  EXPECT_FALSE(ParseEtcdEndpoints("").has_value());
  EXPECT_FALSE(ParseEtcdEndpoints("https://a:2379").has_value());
  EXPECT_FALSE(ParseEtcdEndpoints("a").has_value());
  EXPECT_FALSE(ParseEtcdEndpoints("a:99999").has_value());
  EXPECT_FALSE(ParseEtcdEndpoints("a:1,").has_value());
  EXPECT_EQ(MasterLeaderKey("prod"), "/mooncake/prod/leader");
}

TEST(EtcdClientTest, UnreachableEtcdIsRpcFailNotAHang) {
  auto etcd = EtcdClient::Create({"http://127.0.0.1:1"}, 300);
  ASSERT_TRUE(etcd.has_value());
  auto got = (*etcd)->Get("/k");
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error(), ErrorCode::kRpcFail);
}

TEST(RoleGateTest, NewLeaderServesKeysOnlyAfterItsRebuildWindow) {
  RoleGate gate("c", Millis(150));
  gate.set_self_address("127.0.0.1:7");
  EXPECT_FALSE(gate.leader());
  EXPECT_FALSE(gate.serving_keys());
  gate.BecomeStandby("127.0.0.1:9");
  EXPECT_EQ(gate.Snapshot().leader_address, "127.0.0.1:9");
  gate.BecomeLeader(SteadyClock::now() + std::chrono::seconds(60));
  EXPECT_TRUE(gate.leader());
  EXPECT_FALSE(gate.serving_keys());  // workers are still re-announcing
  RoleSnapshot role = gate.Snapshot();
  EXPECT_EQ(role.leader_address, "127.0.0.1:7");
  EXPECT_EQ(role.cluster_name, "c");
  std::this_thread::sleep_for(Millis(200));
  EXPECT_TRUE(gate.serving_keys());
  gate.BecomeStandby("");
  EXPECT_FALSE(gate.serving_keys());
}

TEST(RoleGateTest, LeaderStepsDownByItselfWhenItsLeaseMayHaveEnded) {
  RoleGate gate("c", Millis(0));
  gate.BecomeLeader(SteadyClock::now() + Millis(100));
  EXPECT_TRUE(gate.serving_keys());
  std::this_thread::sleep_for(Millis(150));
  // No refresh came (etcd slow or gone): a standby may lead by now.
  EXPECT_FALSE(gate.leader());
  EXPECT_FALSE(gate.serving_keys());
  EXPECT_FALSE(gate.Snapshot().leader);
  gate.ExtendLeadership(SteadyClock::now() + Millis(100));
  EXPECT_TRUE(gate.leader());
}

TEST(MasterEndpointTest, SeesNotLeaderInEveryReplyShape) {
  EXPECT_TRUE(SaysNotLeader(rpc::ErrorCode::NOT_LEADER));
  EXPECT_FALSE(SaysNotLeader(rpc::ErrorCode::OBJECT_NOT_FOUND));
  rpc::LocationResult location;
  location.code = rpc::ErrorCode::NOT_LEADER;
  EXPECT_TRUE(SaysNotLeader(location));
  std::vector<rpc::PutOwnerResult> batch(3);
  EXPECT_FALSE(SaysNotLeader(batch));
  batch[1].code = rpc::ErrorCode::NOT_LEADER;
  EXPECT_TRUE(SaysNotLeader(batch));
  EXPECT_FALSE(SaysNotLeader(std::vector<rpc::NodeInfo>{}));
  // BatchRemoveOwner answers bare codes: a standby's batch must be followed
  // to the leader like any other reply.
  std::vector<rpc::ErrorCode::type> codes{rpc::ErrorCode::OK, rpc::ErrorCode::OK};
  EXPECT_FALSE(SaysNotLeader(codes));
  codes[1] = rpc::ErrorCode::NOT_LEADER;
  EXPECT_TRUE(SaysNotLeader(codes));
}

TEST(MasterEndpointTest, ValidatesStaticAndEtcdTargets) {
  EXPECT_TRUE(ValidateMasterTarget({.host = "h", .port = 1}, nullptr).has_value());
  EXPECT_FALSE(ValidateMasterTarget({.host = "", .port = 1}, nullptr).has_value());
  MasterTarget etcd{.etcd_endpoints = {"http://127.0.0.1:2379"}, .cluster_name = "c"};
  EXPECT_TRUE(ValidateMasterTarget(etcd, nullptr).has_value());
  etcd.cluster_name = "a/b";
  std::string why;
  EXPECT_FALSE(ValidateMasterTarget(etcd, &why).has_value());
  EXPECT_NE(why.find("cluster-name"), std::string::npos);
}

TEST(MasterEndpointTest, GivesUpWithinTheLeaderWaitWhenEtcdIsDown) {
  MasterEndpoint endpoint(
      MasterTarget{
          .etcd_endpoints = {"http://127.0.0.1:1"}, .cluster_name = "c", .leader_wait_ms = 300},
      RpcOptions{.connect_timeout_ms = 200});
  auto started = SteadyClock::now();
  auto reply = endpoint.Call([](rpc::MasterServiceClient& c) {
    rpc::MasterRole role;
    c.GetRole(role);
    return role;
  });
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error(), ErrorCode::kRpcFail);
  EXPECT_LT(SteadyClock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(endpoint.address(), "");
}

TEST(HaFlagsTest, MasterAndWorkerAcceptEtcdAndRejectBadValues) {
  std::string message;
  const char* master_args[] = {"mooncake-master", "--etcd", "http://127.0.0.1:2379,10.0.0.2:2379",
                               "--cluster-name", "prod"};
  auto master = ParseMasterConfig(5, master_args, &message);
  ASSERT_TRUE(master.has_value()) << message;
  EXPECT_EQ(master->cluster_name, "prod");
  EXPECT_EQ(master->etcd_lease_ttl_s, 3);

  const char* bad_master[] = {"mooncake-master", "--etcd", "https://x:1"};
  EXPECT_FALSE(ParseMasterConfig(3, bad_master, &message).has_value());
  EXPECT_NE(message.find("--etcd"), std::string::npos) << message;
  const char* wildcard[] = {"mooncake-master", "--etcd", "127.0.0.1:2379", "--host", "0.0.0.0"};
  EXPECT_FALSE(ParseMasterConfig(5, wildcard, &message).has_value());
  EXPECT_NE(message.find("--advertise-address"), std::string::npos) << message;

  const char* worker_args[] = {"mooncake-worker", "--etcd", "http://127.0.0.1:2379"};
  auto worker = ParseWorkerConfig(3, worker_args, &message);
  ASSERT_TRUE(worker.has_value()) << message;
  EXPECT_EQ(worker->etcd, "http://127.0.0.1:2379");
  EXPECT_EQ(worker->cluster_name, "mooncake");
  const char* bad_worker[] = {"mooncake-worker", "--etcd", "nope"};
  EXPECT_FALSE(ParseWorkerConfig(3, bad_worker, &message).has_value());
}

TEST(HaFlagsTest, CliTakesEtcdFromFlagEnvOrFileAndMasterFlagWins) {
  cli::CliEnvironment env;
  auto by_flag =
      cli::ParseCli({"--etcd", "http://127.0.0.1:2379", "--cluster-name", "prod", "get", "k"}, env);
  ASSERT_TRUE(by_flag.command.has_value()) << by_flag.err;
  EXPECT_EQ(by_flag.command->etcd, "http://127.0.0.1:2379");
  EXPECT_EQ(by_flag.command->cluster_name, "prod");
  EXPECT_EQ(cli::MasterLabel(*by_flag.command), "etcd http://127.0.0.1:2379 cluster prod");

  env.env_etcd = "127.0.0.1:2379";
  auto by_env = cli::ParseCli({"get", "k"}, env);
  ASSERT_TRUE(by_env.command.has_value()) << by_env.err;
  EXPECT_EQ(by_env.command->etcd, "127.0.0.1:2379");
  EXPECT_EQ(by_env.command->cluster_name, "mooncake");
  auto master_wins = cli::ParseCli({"--master", "10.0.0.1:50051", "get", "k"}, env);
  ASSERT_TRUE(master_wins.command.has_value()) << master_wins.err;
  EXPECT_EQ(master_wins.command->etcd, "");
  EXPECT_EQ(master_wins.command->master_host, "10.0.0.1");

  auto both = cli::ParseCli({"--master", "h:1", "--etcd", "h:2", "get", "k"}, env);
  EXPECT_FALSE(both.command.has_value());
  EXPECT_EQ(both.exit_code, cli::kExitUsage);
  auto bad = cli::ParseCli({"--etcd", "https://h:2", "get", "k"}, cli::CliEnvironment{});
  EXPECT_FALSE(bad.command.has_value());
  EXPECT_EQ(bad.exit_code, cli::kExitUsage);

  std::string problem;
  auto file = cli::ParseCliConfig("etcd = \"http://e:2379\"\ncluster-name = \"c2\"\n", &problem);
  ASSERT_TRUE(file.has_value()) << problem;
  EXPECT_EQ(file->etcd, "http://e:2379");
  EXPECT_EQ(file->cluster_name, "c2");
}

}  // namespace
}  // namespace mooncake
