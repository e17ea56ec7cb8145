// The REST admin servers of real mooncake-master and mooncake-worker
// processes, over real HTTP on loopback. The admin port of each process is
// the second line of its ready file (the harness starts everything with
// --port 0, so the admin ports are picked free as well).

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr char kToken[] = "secret";

// The body of `r` as JSON; nullopt when it is not JSON.
std::optional<json> Json(const HttpReply& r) {
  try {
    return json::parse(r.body);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string Show(const std::optional<HttpReply>& r) {
  if (!r) return "no reply";
  return "status=" + std::to_string(r->status) + " body=" + r->body.substr(0, 2000);
}

// Lines of a ready file: RPC port, then admin port.
std::vector<int> ReadyFilePorts(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<int> ports;
  long port = 0;
  while (in >> port) ports.push_back(static_cast<int>(port));
  return ports;
}

class AdminProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Given a master, a worker w1 whose admin API wants a token, and an open w2.
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker(
        "w1", {.dram = 8 * kMiB, .ssd = 64 * kMiB, .extra_args = {"--admin-token", kToken}}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 * kMiB, .ssd = 64 * kMiB}));
    master_admin_ = AdminPort("master", cluster_.master_port());
    w1_admin_ = AdminPort("w1", cluster_.worker_port("w1"));
    w2_admin_ = AdminPort("w2", cluster_.worker_port("w2"));
    ASSERT_GT(master_admin_, 0);
    ASSERT_GT(w1_admin_, 0);
    ASSERT_GT(w2_admin_, 0);
    client_ = cluster_.NewClient();
    ASSERT_TRUE(client_);
  }

  // The admin port from `name`'s ready file, after checking its first line.
  int AdminPort(const std::string& name, int rpc_port) {
    auto ports = ReadyFilePorts(cluster_.dir() / (name + ".port"));
    EXPECT_EQ(ports.size(), 2u) << name << "'s ready file";
    if (ports.size() != 2) return -1;
    EXPECT_EQ(ports[0], rpc_port) << name;
    EXPECT_NE(ports[1], rpc_port) << name;
    return ports[1];
  }

  // GET that must answer 200 with a JSON object.
  json GetJson(int port, const std::string& target) {
    auto r = Http(port, "GET", target);
    EXPECT_TRUE(r && r->status == 200) << target << ": " << Show(r);
    if (!r) return json();
    auto doc = Json(*r);
    EXPECT_TRUE(doc) << target << " is not JSON: " << r->body;
    return doc ? *doc : json();
  }

  TestCluster cluster_;
  std::unique_ptr<Client> client_;
  int master_admin_ = -1;
  int w1_admin_ = -1;
  int w2_admin_ = -1;
};

TEST_F(AdminProcessTest, MasterHealthNodesKeysAndMetrics) {
  auto health = GetJson(master_admin_, "/health");
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["role"], "master");
  EXPECT_EQ(health["nodes_alive"], 2);
  EXPECT_EQ(health["nodes_dead"], 0);
  EXPECT_TRUE(health.contains("keys")) << health.dump();

  auto nodes = GetJson(master_admin_, "/nodes");
  ASSERT_TRUE(nodes["nodes"].is_array()) << nodes.dump();
  std::set<std::string> alive;
  for (const auto& node : nodes["nodes"]) {
    EXPECT_EQ(node["state"], "alive") << node.dump();
    EXPECT_TRUE(node["tiers"].is_array()) << node.dump();
    if (node["alive"] == true) alive.insert(node["node_id"].get<std::string>());
    const std::string id = node["node_id"].get<std::string>();
    if (id == "w1" || id == "w2") {
      EXPECT_EQ(node["port"].get<int>(), cluster_.worker_port(id)) << node.dump();
      EXPECT_EQ(node["address"], "127.0.0.1:" + std::to_string(cluster_.worker_port(id)));
    }
  }
  EXPECT_EQ(alive, (std::set<std::string>{"w1", "w2"})) << nodes.dump();

  // After a put of a key with a '/', /keys/{key} names its owner.
  ASSERT_TRUE(IsOk(client_->Put("weights/shard0", "abc", {.preferred_node = "w2"})));
  auto owner = GetJson(master_admin_, "/keys/weights%2Fshard0");
  EXPECT_EQ(owner["key"], "weights/shard0");
  EXPECT_EQ(owner["node_id"], "w2");
  EXPECT_EQ(owner["port"].get<int>(), cluster_.worker_port("w2"));
  EXPECT_EQ(owner["host"], "127.0.0.1");
  auto missing = Http(master_admin_, "GET", "/keys/no-such-key");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << Show(missing);
  auto err = Json(*missing);
  ASSERT_TRUE(err) << missing->body;
  EXPECT_EQ((*err)["code"], "OBJECT_NOT_FOUND");

  // /keys?prefix= pages through the keys in order.
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) {
    expected.push_back("page-" + std::to_string(i));
    ASSERT_TRUE(IsOk(client_->Put(expected.back(), "v")));
  }
  ASSERT_TRUE(IsOk(client_->Put("other-key", "v")));
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  for (; pages < 10; ++pages) {
    std::string target = "/keys?prefix=page-&limit=2";
    if (!cursor.empty()) target += "&cursor=" + cursor;
    auto page = GetJson(master_admin_, target);
    ASSERT_TRUE(page["keys"].is_array()) << page.dump();
    EXPECT_LE(page["keys"].size(), 2u);
    EXPECT_EQ(page["count"].get<size_t>(), page["keys"].size()) << page.dump();
    for (const auto& key : page["keys"]) seen.push_back(key.get<std::string>());
    if (page["next_cursor"].is_null()) break;
    cursor = page["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(pages, 2) << "5 keys at 2 per page are 3 pages";
  auto all = GetJson(master_admin_, "/keys");
  EXPECT_EQ(all["keys"].size(), 7u) << all.dump();
  EXPECT_TRUE(all["next_cursor"].is_null()) << all.dump();
  auto bad_limit = Http(master_admin_, "GET", "/keys?limit=0");
  ASSERT_TRUE(bad_limit);
  EXPECT_EQ(bad_limit->status, 400) << Show(bad_limit);

  auto metrics = Http(master_admin_, "GET", "/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200) << Show(metrics);
  EXPECT_NE(metrics->body.find("mooncake_master_keys 7"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("mooncake_master_node_up{node=\"w1\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->headers.find("content-type: text/plain"), std::string::npos)
      << metrics->headers;
}

TEST_F(AdminProcessTest, WorkerHealthStatsObjectsConfigAndMetrics) {
  auto health = GetJson(w2_admin_, "/health");
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["role"], "worker");
  EXPECT_EQ(health["node_id"], "w2");
  EXPECT_EQ(health["tiers"], 2);

  ASSERT_TRUE(IsOk(client_->Put("obj", std::string(3000, 'o'), {.preferred_node = "w2"})));
  ASSERT_TRUE(IsOk(client_->Get("obj")));
  ASSERT_TRUE(IsOk(client_->Exist("obj", false)));

  auto stats = GetJson(w2_admin_, "/stats");
  EXPECT_EQ(stats["node_id"], "w2");
  ASSERT_TRUE(stats["tiers"].is_array()) << stats.dump();
  std::set<std::string> kinds;
  for (const auto& tier : stats["tiers"]) {
    for (const char* field : {"name", "kind", "capacity", "used", "objects", "hits",
                              "promotions_in", "demotions_out", "evictions", "pinned_bytes"}) {
      EXPECT_TRUE(tier.contains(field)) << field << ": " << tier.dump();
    }
    kinds.insert(tier["kind"].get<std::string>());
    if (tier["kind"] == "dram") {
      EXPECT_EQ(tier["capacity"].get<uint64_t>(), 16 * kMiB);
      EXPECT_EQ(tier["objects"], 1);
      EXPECT_GE(tier["used"].get<uint64_t>(), 3000u);
      EXPECT_GE(tier["hits"].get<int64_t>(), 1);
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"dram", "ssd"}));
  EXPECT_GE(stats["totals"]["puts"].get<int64_t>(), 1) << stats.dump();
  EXPECT_GE(stats["totals"]["gets"].get<int64_t>(), 1) << stats.dump();
  EXPECT_GE(stats["requests"]["get"]["requests"].get<int64_t>(), 1) << stats.dump();

  auto object = GetJson(w2_admin_, "/objects/obj");
  EXPECT_EQ(object["key"], "obj");
  EXPECT_EQ(object["tier"], "dram");
  EXPECT_EQ(object["size"], 3000);
  auto info = client_->Inspect("obj");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(object["version"].get<int64_t>(), info->version);
  EXPECT_EQ(object["offset"].get<int64_t>(), info->offset);
  for (const char* field :
       {"hard_pinned", "soft_pinned", "state", "readers", "lease_remaining_ms", "idle_ms"}) {
    EXPECT_TRUE(object.contains(field)) << field << ": " << object.dump();
  }
  EXPECT_GT(object["lease_remaining_ms"].get<int64_t>(), 0) << "read a moment ago";
  // Another worker does not hold it.
  auto elsewhere = Http(w1_admin_, "GET", "/objects/obj");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->status, 404) << Show(elsewhere);

  // /config: effective settings under flag names; the token never appears.
  auto config = GetJson(w1_admin_, "/config");
  EXPECT_EQ(config["dram-capacity"].get<uint64_t>(), 8 * kMiB) << config.dump();
  EXPECT_EQ(config["ssd-capacity"].get<uint64_t>(), 64 * kMiB) << config.dump();
  EXPECT_EQ(config["node-id"], "w1");
  EXPECT_EQ(config["port"].get<int>(), cluster_.worker_port("w1")) << "the bound port";
  EXPECT_EQ(config["master"], cluster_.master_address());
  EXPECT_EQ(config["etcd"], "") << config.dump();
  EXPECT_EQ(config["master-shards"], "") << config.dump();
  // The port it listens on (picked because --port is 0), not the default.
  EXPECT_EQ(config["admin-port"].get<int>(), w1_admin_) << config.dump();
  EXPECT_FALSE(config.contains("admin-token")) << config.dump();
  EXPECT_EQ(config["admin-token-set"], true) << config.dump();
  EXPECT_EQ(config.dump().find(kToken), std::string::npos) << config.dump();

  auto metrics = Http(w2_admin_, "GET", "/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200) << Show(metrics);
  for (const char* name :
       {"mooncake_worker_requests_total{", "mooncake_worker_request_duration_seconds",
        "mooncake_worker_tier_capacity_bytes{", "mooncake_worker_puts_total"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name << "\n" << metrics->body;
  }
  EXPECT_NE(metrics->body.find("op=\"get\""), std::string::npos) << metrics->body;
}

TEST_F(AdminProcessTest, EvictMovesDramObjectsToSsdAndBadBodiesAreRejected) {
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) {
    keys.push_back("ev-" + std::to_string(i));
    ASSERT_TRUE(
        IsOk(client_->Put(keys.back(), PatternBytes(i, 256 * kKiB), {.preferred_node = "w1"})));
  }
  for (const auto& key : keys) {
    auto info = client_->Inspect(key);
    ASSERT_TRUE(IsOk(info));
    ASSERT_EQ(info->tier, "dram") << key;
  }
  const std::string body = R"({"tier":"dram","target_ratio":0})";

  // w1 runs with a token: without it (or with a wrong one) nothing happens.
  auto no_token = Http(w1_admin_, "POST", "/evict", body);
  ASSERT_TRUE(no_token);
  EXPECT_EQ(no_token->status, 401) << Show(no_token);
  auto wrong = Http(w1_admin_, "POST", "/evict", body, "not-the-token");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401) << Show(wrong);
  EXPECT_EQ(client_->Inspect(keys[0])->tier, "dram");

  // Malformed JSON and bad values: 400, and the worker lives on.
  for (const std::string& bad :
       {std::string("{\"tier\":"), std::string("not json"),
        std::string(R"({"tier":"dram","target_ratio":1.5})"),
        std::string(R"({"tier":"dram","target_ratio":"x"})"), std::string("[]")}) {
    auto r = Http(w1_admin_, "POST", "/evict", bad, kToken);
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad << ": " << Show(r);
    auto err = Json(*r);
    EXPECT_TRUE(err && err->contains("error")) << r->body;
  }
  auto no_tier = Http(w1_admin_, "POST", "/evict", R"({"tier":"nvme","target_ratio":0})", kToken);
  ASSERT_TRUE(no_tier);
  EXPECT_EQ(no_tier->status, 404) << Show(no_tier);
  EXPECT_TRUE(cluster_.IsRunning("w1"));
  EXPECT_EQ(GetJson(w1_admin_, "/health")["status"], "ok");

  // With the token: DRAM empties into SSD.
  auto evict = Http(w1_admin_, "POST", "/evict", body, kToken);
  ASSERT_TRUE(evict);
  ASSERT_EQ(evict->status, 200) << Show(evict);
  auto result = Json(*evict);
  ASSERT_TRUE(result) << evict->body;
  EXPECT_EQ((*result)["tier"], "dram");
  EXPECT_GE((*result)["bytes_freed"].get<uint64_t>(), 6 * 256 * kKiB) << result->dump();
  EXPECT_EQ((*result)["used"].get<uint64_t>(), 0u) << result->dump();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto info = client_->Inspect(keys[i]);
    ASSERT_TRUE(IsOk(info));
    EXPECT_EQ(info->tier, "ssd") << keys[i];
    EXPECT_EQ(info->node_id, "w1") << keys[i];
  }
  // Still readable, byte for byte.
  auto got = client_->Get(keys[3]);
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == PatternBytes(3, 256 * kKiB));

  // w2 has no token: its /evict is open.
  auto open = Http(w2_admin_, "POST", "/evict", body);
  ASSERT_TRUE(open);
  EXPECT_EQ(open->status, 200) << Show(open);
}

TEST_F(AdminProcessTest, DeleteObjectNeedsTheToken) {
  ASSERT_TRUE(IsOk(client_->Put("doomed", "bye", {.preferred_node = "w1"})));

  auto no_token = Http(w1_admin_, "DELETE", "/objects/doomed");
  ASSERT_TRUE(no_token);
  EXPECT_EQ(no_token->status, 401) << Show(no_token);
  EXPECT_NE(no_token->headers.find("www-authenticate: bearer"), std::string::npos)
      << no_token->headers;
  auto err = Json(*no_token);
  ASSERT_TRUE(err) << no_token->body;
  EXPECT_EQ((*err)["code"], "UNAUTHORIZED");
  auto wrong = Http(w1_admin_, "DELETE", "/objects/doomed", {}, "secreT");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401) << Show(wrong);
  auto still = client_->Exist("doomed", false);
  ASSERT_TRUE(IsOk(still));
  EXPECT_TRUE(*still);

  // The Exist just leased it: without force it is 409, with force it goes.
  auto leased = Http(w1_admin_, "DELETE", "/objects/doomed", {}, kToken);
  ASSERT_TRUE(leased);
  EXPECT_EQ(leased->status, 409) << Show(leased);
  auto removed = Http(w1_admin_, "DELETE", "/objects/doomed?force=true", {}, kToken);
  ASSERT_TRUE(removed);
  ASSERT_EQ(removed->status, 200) << Show(removed);
  auto doc = Json(*removed);
  ASSERT_TRUE(doc) << removed->body;
  EXPECT_EQ((*doc)["key"], "doomed");
  EXPECT_EQ((*doc)["removed"], true);

  // Gone everywhere: the worker, the master, the client.
  EXPECT_TRUE(FailsWith(client_->Get("doomed"), ErrorCode::kObjectNotFound));
  auto exists = client_->Exist("doomed", false);
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  auto at_master = Http(master_admin_, "GET", "/keys/doomed");
  ASSERT_TRUE(at_master);
  EXPECT_EQ(at_master->status, 404) << Show(at_master);
  auto again = Http(w1_admin_, "DELETE", "/objects/doomed?force=true", {}, kToken);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 404) << Show(again);

  // Reads stay open on a worker with a token.
  auto read = Http(w1_admin_, "GET", "/health");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200) << Show(read);
}

}  // namespace
}  // namespace mooncake::testing
