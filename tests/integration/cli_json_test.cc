// mooncake-cli --json: one schema for every command. Each run prints exactly
// one JSON object on stdout with "ok"; a failure adds "error" (a human
// message) and "code" (the ErrorCode name, "USAGE" for usage errors, or
// "LOCAL_IO"). Exit codes stay 0 ok, 1 not found, 2 usage, 3 server error.
// A dead node never hides the others in `stats` and `nodes`.

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1ull << 20;

std::string Show(const CliResult& r) {
  return "exit=" + std::to_string(r.exit_code) + "\n  stdout: " + r.out.substr(0, 2000) +
         "\n  stderr: " + r.err.substr(0, 2000);
}

// Checks the schema of one --json run: stdout is exactly one line holding
// one JSON object with a boolean "ok"; when ok is false, string "error" and
// "code". Returns the object, or nullopt after recording a failure.
std::optional<json> OneObject(const CliResult& r) {
  if (r.out.empty() || r.out.back() != '\n' || r.out.find('\n') != r.out.size() - 1) {
    ADD_FAILURE() << "stdout is not exactly one line\n" << Show(r);
    return std::nullopt;
  }
  json doc;
  try {
    doc = json::parse(r.out);
  } catch (const json::exception& e) {
    ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << Show(r);
    return std::nullopt;
  }
  if (!doc.is_object() || !doc.contains("ok") || !doc["ok"].is_boolean()) {
    ADD_FAILURE() << "not an object with a boolean ok\n" << Show(r);
    return std::nullopt;
  }
  if (!doc["ok"].get<bool>()) {
    EXPECT_TRUE(doc.contains("error") && doc["error"].is_string()) << Show(r);
    EXPECT_TRUE(doc.contains("code") && doc["code"].is_string()) << Show(r);
    EXPECT_FALSE(r.err.empty()) << "a failure also says so on stderr\n" << Show(r);
  } else {
    EXPECT_FALSE(doc.contains("error")) << Show(r);
    EXPECT_FALSE(doc.contains("code")) << Show(r);
  }
  return doc;
}

class CliJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A short node TTL so that a killed worker is declared dead quickly.
    ASSERT_TRUE(cluster_.StartMaster({"--node-ttl-ms", "1000"}));
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
  }

  // Runs `--json ARGS`, expects `exit_code` and `ok`, returns the object.
  json Run(const std::vector<std::string>& args, int exit_code, bool ok,
           std::string_view stdin_data = {}) {
    std::vector<std::string> full = {"--json"};
    full.insert(full.end(), args.begin(), args.end());
    auto r = cluster_.RunCli(full, stdin_data);
    EXPECT_EQ(r.exit_code, exit_code) << args[0] << "\n" << Show(r);
    auto doc = OneObject(r);
    if (!doc) return json::object();
    EXPECT_EQ((*doc)["ok"], ok) << args[0] << "\n" << Show(r);
    return *doc;
  }

  TestCluster cluster_;
};

TEST_F(CliJsonTest, EveryCommandPrintsOneObjectWithOk) {
  // put / upsert
  auto put = Run({"--node", "w1", "put", "k", "hello"}, 0, true);
  EXPECT_EQ(put["key"], "k");
  EXPECT_EQ(put["size"], 5);
  auto dup = Run({"put", "k", "again"}, 3, false);
  EXPECT_EQ(dup["code"], "OBJECT_ALREADY_EXISTS");
  EXPECT_EQ(dup["code_value"], -705);
  auto upsert = Run({"--node", "w1", "upsert", "k", "HELLO!"}, 0, true);
  EXPECT_EQ(upsert["size"], 6);

  // get: always value_base64 and size, for text and binary alike.
  auto get = Run({"get", "k"}, 0, true);
  EXPECT_EQ(get["key"], "k");
  EXPECT_EQ(get["size"], 6);
  EXPECT_EQ(get["value_base64"], "SEVMTE8h");
  EXPECT_FALSE(get.contains("value")) << get.dump();
  EXPECT_TRUE(get["version"].is_number_integer()) << get.dump();
  Run({"put", "bin", "-"}, 0, true, std::string("\x00\xff\x80", 3));
  EXPECT_EQ(Run({"get", "bin"}, 0, true)["value_base64"], "AP+A");
  const auto out_file = cluster_.dir() / "k.out";
  auto to_file = Run({"get", "k", "-o", out_file.string()}, 0, true);
  EXPECT_EQ(to_file["file"], out_file.string());
  EXPECT_EQ(to_file["size"], 6);
  // The same fields as to stdout, only the value replaced by "file".
  EXPECT_EQ(to_file["version"], get["version"]) << to_file.dump();
  EXPECT_FALSE(to_file.contains("value_base64")) << to_file.dump();
  auto missing = Run({"get", "nope"}, 1, false);
  EXPECT_EQ(missing["code"], "OBJECT_NOT_FOUND");

  // exist: the probe succeeded either way; exit 1 when absent.
  auto exists = Run({"exist", "k"}, 0, true);
  EXPECT_EQ(exists["exists"], true);
  auto absent = Run({"exist", "nope"}, 1, true);
  EXPECT_EQ(absent["exists"], false);

  // inspect / locate
  auto inspect = Run({"inspect", "k"}, 0, true);
  EXPECT_EQ(inspect["node_id"], "w1");
  EXPECT_EQ(Run({"inspect", "nope"}, 1, false)["code"], "OBJECT_NOT_FOUND");
  auto locate = Run({"locate", "k"}, 0, true);
  EXPECT_EQ(locate["node_id"], "w1");
  EXPECT_EQ(Run({"locate", "nope"}, 1, false)["code"], "OBJECT_NOT_FOUND");

  // stats of one node: its counters at the top level.
  auto one = Run({"stats", "--node", "w1"}, 0, true);
  EXPECT_EQ(one["node_id"], "w1");
  EXPECT_TRUE(one["tiers"].is_array()) << one.dump();
  EXPECT_EQ(Run({"stats", "--node", "no-such-node"}, 2, false)["code"], "NODE_NOT_FOUND");
  // stats of every node, and nodes: a "nodes" array.
  auto all = Run({"stats"}, 0, true);
  ASSERT_TRUE(all["nodes"].is_array()) << all.dump();
  EXPECT_EQ(all["nodes"].size(), 2u) << all.dump();
  auto nodes = Run({"nodes"}, 0, true);
  ASSERT_TRUE(nodes["nodes"].is_array()) << nodes.dump();
  EXPECT_EQ(nodes["nodes"].size(), 2u) << nodes.dump();

  // remove: a fresh read's lease refuses a plain remove; --force goes through.
  Run({"get", "k"}, 0, true);
  auto leased = Run({"remove", "k"}, 3, false);
  EXPECT_EQ(leased["code"], "OBJECT_HAS_LEASE");
  EXPECT_EQ(Run({"remove", "k", "--force"}, 0, true)["key"], "k");
  EXPECT_EQ(Run({"remove", "k"}, 1, false)["code"], "OBJECT_NOT_FOUND");

  // A local file problem.
  auto no_file = Run({"put", "f", "--file", (cluster_.dir() / "absent.bin").string()}, 2, false);
  EXPECT_EQ(no_file["code"], "LOCAL_IO");
  // Input that cannot be read (a directory opens, then fails to read): exit
  // 3, whatever size it reports, as for a read error in a large file.
  auto dir_file = Run({"put", "f", "--file", cluster_.dir().string()}, 3, false);
  EXPECT_EQ(dir_file["code"], "LOCAL_IO");
  EXPECT_NE(dir_file["error"].get<std::string>().find("put failed: reading the input: "),
            std::string::npos)
      << dir_file.dump();
}

TEST_F(CliJsonTest, UsageErrorsAndAnUnreachableMasterAreJsonToo) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"put", "k"},                    // no value
                                             {"bogus"},                       // unknown subcommand
                                             {"get"},                         // no key
                                             {"get", "k", "--no-such-flag"},  // unknown flag
                                             {"-h", "127.0.0.1", "nodes"},    // redis habit
                                             {"--config", "/nonexistent/cli.toml", "nodes"}}) {
    auto usage = Run(args, 2, false);
    EXPECT_EQ(usage["code"], "USAGE") << usage.dump();
  }
  auto r = cluster_.RunCli({"--json", "--master", "127.0.0.1:1", "nodes"}, {}, false);
  EXPECT_EQ(r.exit_code, 3) << Show(r);
  auto doc = OneObject(r);
  ASSERT_TRUE(doc);
  EXPECT_EQ((*doc)["ok"], false);
  EXPECT_EQ((*doc)["code"], "RPC_FAIL");
}

TEST_F(CliJsonTest, ADeadNodeIsReportedAndNeverHidesTheLiveOne) {
  ASSERT_EQ(Run({"--node", "w1", "put", "live", "v"}, 0, true)["ok"], true);
  cluster_.KillWorker("w2");

  // Right away (the master may still list w2 as alive) and once the master
  // has declared it dead: w1's counters are there, w2 carries its error.
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      ASSERT_TRUE(Eventually(
          [&] {
            auto r = cluster_.RunCli({"--json", "nodes"});
            return r.out.find("\"alive\":false") != std::string::npos;
          },
          20s))
          << "the master never declared w2 dead";
    }
    auto stats = Run({"stats"}, 3, false);
    EXPECT_NE(stats["error"].get<std::string>().find("1 of 2"), std::string::npos) << stats.dump();
    ASSERT_TRUE(stats["nodes"].is_array()) << stats.dump();
    ASSERT_EQ(stats["nodes"].size(), 2u) << stats.dump();
    bool saw_w1 = false, saw_w2 = false;
    for (const auto& node : stats["nodes"]) {
      if (node["node_id"] == "w1") {
        saw_w1 = true;
        EXPECT_EQ(node["ok"], true) << node.dump();
        EXPECT_GE(node["puts"].get<int64_t>(), 1) << node.dump();
        EXPECT_TRUE(node["tiers"].is_array()) << node.dump();
      } else if (node["node_id"] == "w2") {
        saw_w2 = true;
        EXPECT_EQ(node["ok"], false) << node.dump();
        EXPECT_TRUE(node["error"].is_string()) << node.dump();
        EXPECT_TRUE(node["code"].is_string()) << node.dump();
      }
    }
    EXPECT_TRUE(saw_w1 && saw_w2) << stats.dump();
  }

  // nodes lists both; the dead one with alive false and an error.
  auto nodes = Run({"nodes"}, 0, true);
  ASSERT_TRUE(nodes["nodes"].is_array()) << nodes.dump();
  ASSERT_EQ(nodes["nodes"].size(), 2u) << nodes.dump();
  for (const auto& node : nodes["nodes"]) {
    if (node["node_id"] == "w1") {
      EXPECT_EQ(node["alive"], true) << node.dump();
      EXPECT_FALSE(node.contains("error")) << node.dump();
    } else {
      EXPECT_EQ(node["node_id"], "w2") << node.dump();
      EXPECT_EQ(node["alive"], false) << node.dump();
      EXPECT_TRUE(node["error"].is_string()) << node.dump();
    }
  }

  // Without --json: w1's counters still print, w2's error goes to stderr.
  auto text = cluster_.RunCli({"stats"});
  EXPECT_EQ(text.exit_code, 3) << Show(text);
  EXPECT_NE(text.out.find("node w1"), std::string::npos) << Show(text);
  EXPECT_NE(text.err.find("w2"), std::string::npos) << Show(text);
}

}  // namespace
}  // namespace mooncake::testing
