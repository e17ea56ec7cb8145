// More of mooncake-cli against a real cluster: upsert, inspect, exist
// --prefetch, the --json output of every command, and the exit codes of bad
// requests (cli_test.cc covers put/get/exist/remove and usage basics).

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

void WriteFile(const std::filesystem::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string Show(const CliResult& r) {
  return "exit=" + std::to_string(r.exit_code) + "\n  stdout: " + r.out.substr(0, 2000) +
         "\n  stderr: " + r.err.substr(0, 2000);
}

// stdout of `r` as one JSON document; nullopt (and a test failure) if it is not.
std::optional<json> ParseJson(const CliResult& r) {
  try {
    return json::parse(Trim(r.out));
  } catch (const json::exception& e) {
    ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << Show(r);
    return std::nullopt;
  }
}

class CliMoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Given a master, a worker with a small DRAM tier (so objects reach its
    // SSD quickly) and a roomier one.
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 4 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
  }

  CliResult Cli(const std::vector<std::string>& args, std::string_view stdin_data = {}) {
    return cluster_.RunCli(args, stdin_data);
  }

  // `mooncake-cli --json inspect KEY` parsed; nullopt if it failed.
  std::optional<json> InspectJson(const std::string& key) {
    auto r = Cli({"--json", "inspect", key});
    if (r.exit_code != 0) return std::nullopt;
    try {
      return json::parse(Trim(r.out));
    } catch (const json::exception&) {
      return std::nullopt;
    }
  }

  TestCluster cluster_;
};

TEST_F(CliMoreTest, UpsertCreatesThenReplacesInPlaceFromArgumentFileAndStdin) {
  // When an absent key is upserted, it is created.
  auto created = Cli({"--node", "w2", "upsert", "doc", "version-one"});
  ASSERT_EQ(created.exit_code, 0) << Show(created);
  EXPECT_NE(created.out.find("doc"), std::string::npos) << Show(created);
  auto first = InspectJson("doc");
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)["node_id"], "w2");
  EXPECT_EQ((*first)["size"], 11);
  const int64_t v1 = (*first)["version"].get<int64_t>();
  const int64_t offset = (*first)["offset"].get<int64_t>();

  // When it is upserted with a value of the same size, expect a new version
  // written in place: same node, same offset.
  auto same_size = Cli({"upsert", "doc", "version-two"});
  ASSERT_EQ(same_size.exit_code, 0) << Show(same_size);
  auto second = InspectJson("doc");
  ASSERT_TRUE(second);
  const int64_t v2 = (*second)["version"].get<int64_t>();
  EXPECT_GT(v2, v1);
  EXPECT_EQ((*second)["offset"].get<int64_t>(), offset);
  EXPECT_EQ((*second)["node_id"], "w2");
  EXPECT_EQ((*second)["size"], 11);

  // From a file, same size again.
  WriteFile(cluster_.dir() / "v3.txt", "version-3!!");
  auto from_file = Cli({"upsert", "doc", "--file", (cluster_.dir() / "v3.txt").string()});
  ASSERT_EQ(from_file.exit_code, 0) << Show(from_file);
  auto third = InspectJson("doc");
  ASSERT_TRUE(third);
  EXPECT_GT((*third)["version"].get<int64_t>(), v2);
  EXPECT_EQ((*third)["offset"].get<int64_t>(), offset);
  auto get3 = Cli({"get", "doc"});
  ASSERT_EQ(get3.exit_code, 0) << Show(get3);
  EXPECT_EQ(get3.out, "version-3!!");

  // From stdin, with another size: expect the new bytes and size.
  const std::string piped = std::string("\0\x01piped\xff", 8) + PatternBytes(7, 5000);
  auto from_stdin = Cli({"upsert", "doc", "-"}, piped);
  ASSERT_EQ(from_stdin.exit_code, 0) << Show(from_stdin);
  auto fourth = InspectJson("doc");
  ASSERT_TRUE(fourth);
  EXPECT_EQ((*fourth)["size"].get<int64_t>(), static_cast<int64_t>(piped.size()));
  EXPECT_GT((*fourth)["version"].get<int64_t>(), (*third)["version"].get<int64_t>());
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  auto got = client->Get("doc");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == piped) << "upsert from stdin stored different bytes";

  // An absent key upserted from stdin is created as well.
  auto stdin_new = Cli({"upsert", "doc-stdin", "-"}, "fresh");
  ASSERT_EQ(stdin_new.exit_code, 0) << Show(stdin_new);
  auto fresh = client->Get("doc-stdin");
  ASSERT_TRUE(IsOk(fresh));
  EXPECT_EQ(fresh->data, "fresh");
}

TEST_F(CliMoreTest, ASpoolFileThatCannotBeMadeNamesTheCommandAndTheDirectory) {
  // Stdin over one RPC is spooled under $TMPDIR first; given a TMPDIR that
  // does not exist, expect the message to name upsert (or put) and the
  // directory, exit 3.
  const auto no_dir = cluster_.dir() / "no-such-tmp";
  const std::string big(kRpcChunkBytes + 1, 'x');
  for (const std::string command : {"upsert", "put"}) {
    auto r = cluster_.RunCli({command, "big", "-"}, big, true, {"TMPDIR=" + no_dir.string()});
    EXPECT_EQ(r.exit_code, 3) << Show(r);
    EXPECT_NE(r.err.find("error: " + command + " failed: cannot create a spool file in " +
                         no_dir.string() + ": No such file or directory"),
              std::string::npos)
        << Show(r);
  }
}

// `get -o` writes a part file beside the target and renames it: its name
// was the target's plus ~30 bytes, so a 240-byte name that `> FILE` takes
// failed with "File name too long". A 250-byte name works now.
TEST_F(CliMoreTest, GetToAFileWithALongNameWritesIt) {
  auto put = Cli({"put", "long-name", "value for a long file name"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  const std::filesystem::path dir = cluster_.dir() / "long";
  std::filesystem::create_directories(dir);
  const std::filesystem::path target = dir / std::string(250, 'n');
  auto got = Cli({"get", "long-name", "-o", target.string()});
  ASSERT_EQ(got.exit_code, 0) << Show(got);
  std::ifstream in(target, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "value for a long file name");
  // Only the target is left: no part file.
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
}

// TLS files that can be read but not loaded (not PEM) were reported as
// "invalid request (an empty value or a size that does not match)", which
// sent users looking at their request. The message names the TLS file and
// OpenSSL's reason now; the exit code stays 2 (INVALID_PARAMS).
TEST_F(CliMoreTest, AnUnusableTlsFileIsNamedInTheError) {
  const std::string garbage = (cluster_.dir() / "garbage.pem").string();
  WriteFile(garbage, "garbage\n");
  const std::vector<std::string> tls = {"--tls-cert", garbage,    "--tls-key",
                                        garbage,      "--tls-ca", garbage};
  std::vector<std::string> args = tls;
  args.push_back("nodes");
  auto text = Cli(args);
  EXPECT_EQ(text.exit_code, 2) << Show(text);
  EXPECT_NE(text.err.find("error: nodes failed: INVALID_PARAMS (-600): TLS file unusable "
                          "(--tls-cert " +
                          garbage + "): "),
            std::string::npos)
      << Show(text);
  EXPECT_EQ(text.err.find("empty value"), std::string::npos) << Show(text);

  args.insert(args.begin(), "--json");
  auto as_json = Cli(args);
  EXPECT_EQ(as_json.exit_code, 2) << Show(as_json);
  auto out = ParseJson(as_json);
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)["code"], "INVALID_PARAMS");
  EXPECT_NE((*out)["error"].get<std::string>().find("TLS file unusable (--tls-cert " + garbage),
            std::string::npos)
      << Show(as_json);
}

TEST_F(CliMoreTest, InspectShowsOwnerTierSizeVersionAsTextAndJson) {
  auto put = Cli({"--node", "w1", "put", "seen", "0123456789"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);

  auto text = Cli({"inspect", "seen"});
  ASSERT_EQ(text.exit_code, 0) << Show(text);
  for (const char* expected : {"seen", "owner", "w1", "tier", "dram", "size", "10 bytes", "version",
                               "pin", "none", "state"}) {
    EXPECT_NE(text.out.find(expected), std::string::npos) << expected << "\n" << Show(text);
  }

  auto as_json = Cli({"--json", "inspect", "seen"});
  ASSERT_EQ(as_json.exit_code, 0) << Show(as_json);
  auto doc = ParseJson(as_json);
  ASSERT_TRUE(doc);
  EXPECT_EQ((*doc)["ok"], true);
  EXPECT_EQ((*doc)["key"], "seen");
  EXPECT_EQ((*doc)["node_id"], "w1");
  EXPECT_EQ((*doc)["tier"], "dram");
  EXPECT_EQ((*doc)["size"], 10);
  EXPECT_GT((*doc)["version"].get<int64_t>(), 0);
  EXPECT_TRUE(doc->contains("offset")) << doc->dump();
  EXPECT_EQ((*doc)["hard_pinned"], false);
  EXPECT_EQ((*doc)["soft_pinned"], false);
  for (const char* field : {"state", "readers", "lease_remaining_ms", "idle_ms"}) {
    EXPECT_TRUE(doc->contains(field)) << field << ": " << doc->dump();
  }
  // The C++ client agrees.
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  auto info = client->Inspect("seen");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ((*doc)["version"].get<int64_t>(), info->version);
  EXPECT_EQ((*doc)["offset"].get<int64_t>(), info->offset);

  // Pins show up.
  auto pinned = Cli({"put", "pinned", "p", "--hard-pin"});
  ASSERT_EQ(pinned.exit_code, 0) << Show(pinned);
  auto pinned_text = Cli({"inspect", "pinned"});
  EXPECT_NE(pinned_text.out.find("hard"), std::string::npos) << Show(pinned_text);

  // A missing key: exit 1, as text and as JSON.
  auto missing = Cli({"inspect", "no-such-key"});
  EXPECT_EQ(missing.exit_code, 1) << Show(missing);
  EXPECT_NE(missing.err.find("OBJECT_NOT_FOUND"), std::string::npos) << Show(missing);
  auto missing_json = Cli({"--json", "inspect", "no-such-key"});
  EXPECT_EQ(missing_json.exit_code, 1) << Show(missing_json);
  auto err = ParseJson(missing_json);
  ASSERT_TRUE(err);
  EXPECT_EQ((*err)["ok"], false);
  EXPECT_EQ((*err)["code"], "OBJECT_NOT_FOUND");
}

TEST_F(CliMoreTest, ExistPrefetchBringsAnSsdObjectBackToDram) {
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  // Given an object pushed to w1's SSD by filling its 4 MiB of DRAM.
  const std::string cold = PatternBytes(1, 512 * kKiB);
  ASSERT_TRUE(IsOk(client->Put("cold", cold, {.preferred_node = "w1"})));
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(IsOk(client->Put("fill-" + std::to_string(i), PatternBytes(100 + i, 512 * kKiB),
                                 {.preferred_node = "w1"})));
  }
  ASSERT_TRUE(Eventually([&] {
    auto info = client->Inspect("cold");
    return info && info->tier == "ssd";
  })) << "cold never reached SSD\n"
      << cluster_.LogTail("w1");
  auto before = InspectJson("cold");
  ASSERT_TRUE(before);
  EXPECT_EQ((*before)["tier"], "ssd");
  EXPECT_EQ((*before)["node_id"], "w1");

  // When the CLI probes it with --prefetch: 1 and exit 0 at once.
  auto exist = Cli({"exist", "cold", "--prefetch"});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  EXPECT_EQ(Trim(exist.out), "1") << Show(exist);

  // Expect it in DRAM soon, bytes intact.
  std::optional<json> after;
  EXPECT_TRUE(Eventually([&] {
    after = InspectJson("cold");
    return after && (*after)["tier"] == "dram";
  })) << (after ? after->dump() : "inspect failed")
      << "\n"
      << cluster_.LogTail("w1");
  auto stats = Cli({"--json", "stats", "--node", "w1"});
  ASSERT_EQ(stats.exit_code, 0) << Show(stats);
  auto counters = ParseJson(stats);
  ASSERT_TRUE(counters);
  EXPECT_GE((*counters)["prefetch_started"].get<int64_t>(), 1) << counters->dump();
  auto got = client->Get("cold");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == cold);

  // A prefetch of a missing key is an ordinary miss.
  auto missing = Cli({"exist", "not-there", "--prefetch"});
  EXPECT_EQ(missing.exit_code, 1) << Show(missing);
  EXPECT_EQ(Trim(missing.out), "0") << Show(missing);
}

TEST_F(CliMoreTest, ExistPrefetchForAnUnknownNodeIsRefusedAsPutIs) {
  ASSERT_EQ(Cli({"--node", "w1", "put", "k", "value"}).exit_code, 0);
  // When --node names no registered node, expect what put says of it:
  // NODE_NOT_FOUND naming the node, exit 2, and no "1" that hides the typo.
  auto typo = Cli({"--node", "nosuch", "exist", "k", "--prefetch"});
  EXPECT_EQ(typo.exit_code, 2) << Show(typo);
  EXPECT_NE(typo.err.find("NODE_NOT_FOUND (-2003): no node 'nosuch' is registered"),
            std::string::npos)
      << Show(typo);
  EXPECT_EQ(typo.out, "") << Show(typo);
  auto put = Cli({"--node", "nosuch", "put", "k2", "value"});
  EXPECT_EQ(put.exit_code, 2) << Show(put);
  auto json = Cli({"--json", "--node", "nosuch", "exist", "k", "--prefetch"});
  EXPECT_EQ(json.exit_code, 2) << Show(json);
  auto doc = ParseJson(json);
  ASSERT_TRUE(doc) << Show(json);
  EXPECT_EQ((*doc)["code"], "NODE_NOT_FOUND");
  // A registered node still works.
  auto known = Cli({"--node", "w2", "exist", "k", "--prefetch"});
  EXPECT_EQ(known.exit_code, 0) << Show(known);
  EXPECT_EQ(Trim(known.out), "1") << Show(known);
}

TEST_F(CliMoreTest, StatsAndNodesJsonHaveTheirFields) {
  auto put = Cli({"--node", "w2", "put", "counted", "abc"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  auto get = Cli({"get", "counted"});
  ASSERT_EQ(get.exit_code, 0) << Show(get);

  auto stats = Cli({"stats", "--node", "w2", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << Show(stats);
  auto s = ParseJson(stats);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->is_object()) << s->dump();
  EXPECT_EQ((*s)["node_id"], "w2");
  EXPECT_GE((*s)["puts"].get<int64_t>(), 1);
  EXPECT_GE((*s)["gets"].get<int64_t>(), 1);
  for (const char* field :
       {"get_misses", "upserts", "removes", "dropped", "prefetch_started", "prefetch_succeeded",
        "prefetch_failed", "prefetch_skipped", "moved_in", "moved_out", "pinned_bytes"}) {
    EXPECT_TRUE(s->contains(field)) << field << ": " << s->dump();
  }
  ASSERT_TRUE((*s)["tiers"].is_array());
  bool saw_dram = false, saw_ssd = false;
  for (const auto& tier : (*s)["tiers"]) {
    for (const char* field : {"name", "kind", "capacity", "used", "objects", "hits",
                              "promotions_in", "demotions_out", "evictions"}) {
      EXPECT_TRUE(tier.contains(field)) << field << ": " << tier.dump();
    }
    if (tier["kind"] == "dram") {
      saw_dram = true;
      EXPECT_EQ(tier["capacity"].get<uint64_t>(), 32 * kMiB);
      EXPECT_GE(tier["objects"].get<int64_t>(), 1);
    }
    if (tier["kind"] == "ssd") {
      saw_ssd = true;
      EXPECT_EQ(tier["capacity"].get<uint64_t>(), 64 * kMiB);
    }
  }
  EXPECT_TRUE(saw_dram && saw_ssd) << s->dump();

  EXPECT_EQ((*s)["ok"], true);

  // Without --node: {"ok":true,"nodes":[...]} with every node.
  auto all = Cli({"--json", "stats"});
  ASSERT_EQ(all.exit_code, 0) << Show(all);
  auto a = ParseJson(all);
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["ok"], true) << a->dump();
  ASSERT_TRUE((*a)["nodes"].is_array()) << a->dump();
  EXPECT_EQ((*a)["nodes"].size(), 2u);
  for (const auto& node : (*a)["nodes"]) EXPECT_EQ(node["ok"], true) << node.dump();

  auto nodes = Cli({"nodes", "--json"});
  ASSERT_EQ(nodes.exit_code, 0) << Show(nodes);
  auto listing = ParseJson(nodes);
  ASSERT_TRUE(listing);
  EXPECT_EQ((*listing)["ok"], true) << listing->dump();
  const json* n = &(*listing)["nodes"];
  ASSERT_TRUE(n->is_array()) << listing->dump();
  std::vector<std::string> ids;
  for (const auto& node : *n) {
    ids.push_back(node["node_id"].get<std::string>());
    EXPECT_EQ(node["alive"], true) << node.dump();
    EXPECT_FALSE(node.contains("error")) << node.dump();
    EXPECT_EQ(node["host"], "127.0.0.1") << node.dump();
    EXPECT_GT(node["port"].get<int>(), 0) << node.dump();
    EXPECT_TRUE(node.contains("last_heartbeat_ms")) << node.dump();
    ASSERT_TRUE(node["tiers"].is_array()) << node.dump();
    EXPECT_EQ(node["tiers"].size(), 2u) << node.dump();
    for (const auto& tier : node["tiers"]) {
      for (const char* field : {"name", "kind", "capacity", "used", "objects"}) {
        EXPECT_TRUE(tier.contains(field)) << field << ": " << tier.dump();
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(cluster_.worker_port("w2"), [&] {
    for (const auto& node : *n) {
      if (node["node_id"] == "w2") return node["port"].get<int>();
    }
    return -1;
  }());

  // An unknown node with --json: exit 2 and a JSON error.
  auto unknown = Cli({"--json", "stats", "--node", "no-such-node"});
  EXPECT_EQ(unknown.exit_code, 2) << Show(unknown);
  auto e = ParseJson(unknown);
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["ok"], false);
  EXPECT_EQ((*e)["code"], "NODE_NOT_FOUND");
  EXPECT_TRUE((*e)["error"].is_string()) << e->dump();
}

TEST_F(CliMoreTest, JsonOutputOfPutGetExistRemoveUpsert) {
  auto put = Cli({"--json", "put", "j", "hello"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  auto p = ParseJson(put);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["ok"], true);
  EXPECT_EQ((*p)["key"], "j");
  EXPECT_EQ((*p)["size"], 5);

  auto get = Cli({"--json", "get", "j"});
  ASSERT_EQ(get.exit_code, 0) << Show(get);
  auto g = ParseJson(get);
  ASSERT_TRUE(g);
  EXPECT_EQ((*g)["ok"], true);
  EXPECT_EQ((*g)["key"], "j");
  EXPECT_EQ((*g)["size"], 5);
  // The value is always base64, text or not.
  EXPECT_FALSE(g->contains("value")) << g->dump();
  EXPECT_EQ((*g)["value_base64"], "aGVsbG8=");
  EXPECT_GT((*g)["version"].get<int64_t>(), 0);

  // Bytes that are not UTF-8 the same way.
  auto put_bin = Cli({"put", "bin", "-"}, std::string("\xff\xfe\x00", 3));
  ASSERT_EQ(put_bin.exit_code, 0) << Show(put_bin);
  auto get_bin = Cli({"--json", "get", "bin"});
  ASSERT_EQ(get_bin.exit_code, 0) << Show(get_bin);
  auto b = ParseJson(get_bin);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->contains("value")) << b->dump();
  EXPECT_EQ((*b)["value_base64"], "//4A");

  auto exist = Cli({"--json", "exist", "j"});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  auto x = ParseJson(exist);
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["ok"], true);
  EXPECT_EQ((*x)["key"], "j");
  EXPECT_EQ((*x)["exists"], true);
  auto absent = Cli({"--json", "exist", "nope"});
  EXPECT_EQ(absent.exit_code, 1) << Show(absent);
  auto y = ParseJson(absent);
  ASSERT_TRUE(y);
  EXPECT_EQ((*y)["ok"], true);  // the probe worked; the key is absent
  EXPECT_EQ((*y)["exists"], false);

  // j was just read (lease): a plain remove fails with a JSON error.
  auto leased = Cli({"--json", "remove", "j"});
  EXPECT_EQ(leased.exit_code, 3) << Show(leased);
  auto l = ParseJson(leased);
  ASSERT_TRUE(l);
  EXPECT_EQ((*l)["ok"], false);
  EXPECT_EQ((*l)["code"], "OBJECT_HAS_LEASE");
  EXPECT_EQ((*l)["code_value"], -706);

  auto upsert = Cli({"--json", "upsert", "j", "HELLO"});
  ASSERT_EQ(upsert.exit_code, 0) << Show(upsert);
  auto u = ParseJson(upsert);
  ASSERT_TRUE(u);
  EXPECT_EQ((*u)["ok"], true);
  EXPECT_EQ((*u)["key"], "j");
  EXPECT_EQ((*u)["size"], 5);

  // A forced remove goes through.
  auto remove = Cli({"--json", "remove", "j", "--force"});
  ASSERT_EQ(remove.exit_code, 0) << Show(remove);
  auto r = ParseJson(remove);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["ok"], true);
  EXPECT_EQ((*r)["key"], "j");

  // A put of an existing key: exit 3 and a JSON error.
  auto again = Cli({"--json", "put", "bin", "x"});
  EXPECT_EQ(again.exit_code, 3) << Show(again);
  auto a = ParseJson(again);
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["code"], "OBJECT_ALREADY_EXISTS");
  EXPECT_EQ((*a)["code_value"], -705);
}

TEST_F(CliMoreTest, BadRequestsExitWithTheDocumentedCodes) {
  // Invalid keys: over 4096 bytes, or empty.
  const std::string long_key(4097, 'k');
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"put", long_key, "v"},
                                             {"get", long_key},
                                             {"upsert", long_key, "v"},
                                             {"exist", long_key},
                                             {"inspect", long_key},
                                             {"put", "", "v"},
                                             {"get", ""}}) {
    auto r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " key of " << args[1].size() << " bytes\n" << Show(r);
  }
  // A key of exactly 4096 bytes is fine.
  const std::string max_key(4096, 'k');
  auto max_put = Cli({"put", max_key, "v"});
  EXPECT_EQ(max_put.exit_code, 0) << Show(max_put);

  // A tier name the CLI does not know is a usage error.
  auto nvme = Cli({"put", "t1", "v", "--tier", "nvme"});
  EXPECT_EQ(nvme.exit_code, 2) << Show(nvme);
  EXPECT_EQ(Cli({"exist", "t1"}).exit_code, 1) << "a rejected put stored the key";
  // A known tier the node does not have is TIER_NOT_FOUND, a server error.
  auto vram = Cli({"put", "t2", "v", "--tier", "vram"});
  EXPECT_EQ(vram.exit_code, 3) << Show(vram);
  EXPECT_NE(vram.err.find("TIER_NOT_FOUND"), std::string::npos) << Show(vram);
  auto ssd = Cli({"put", "t3", "v", "--tier", "ssd"});
  EXPECT_EQ(ssd.exit_code, 0) << Show(ssd);
  auto t3 = InspectJson("t3");
  ASSERT_TRUE(t3);
  EXPECT_EQ((*t3)["tier"], "ssd");

  // Hard and soft pin together, or a hard pin with a soft-pin TTL.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"put", "p1", "v", "--hard-pin", "--soft-pin"},
           {"upsert", "p1", "v", "--hard-pin", "--soft-pin"},
           {"put", "p1", "v", "--hard-pin", "--soft-pin-ttl-ms", "1000"},
           {"put", "p1", "v", "--soft-pin-ttl-ms", "86400001"},
           {"put", "p1", "v", "--soft-pin-ttl-ms", "0"}}) {
    auto r = Cli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << Show(r);
  }
  EXPECT_EQ(Cli({"exist", "p1"}).exit_code, 1) << "a rejected put stored the key";

  // get of a missing key with --json: exit 1 and a JSON error object.
  auto missing = Cli({"--json", "get", "no-such-key"});
  EXPECT_EQ(missing.exit_code, 1) << Show(missing);
  auto e = ParseJson(missing);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->is_object()) << e->dump();
  EXPECT_EQ((*e)["ok"], false);
  EXPECT_EQ((*e)["code"], "OBJECT_NOT_FOUND");
  EXPECT_EQ((*e)["code_value"], -704);
  ASSERT_TRUE((*e)["error"].is_string()) << e->dump();
  EXPECT_NE((*e)["error"].get<std::string>().find("does not exist"), std::string::npos)
      << e->dump();
  EXPECT_NE(missing.err.find("OBJECT_NOT_FOUND (-704)"), std::string::npos) << Show(missing);

  // An empty value is an invalid request.
  auto empty = Cli({"put", "empty", "-"}, "");
  EXPECT_EQ(empty.exit_code, 2) << Show(empty);
}

}  // namespace
}  // namespace mooncake::testing
