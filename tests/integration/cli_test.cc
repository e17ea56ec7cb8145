// mooncake-cli against a real cluster: what an operator types, and the exit
// codes scripts rely on (0 ok, 1 not found, 2 usage error, 3 server error).

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::filesystem::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Prints the whole CLI result when an expectation on it fails.
std::string Show(const CliResult& r) {
  return "exit=" + std::to_string(r.exit_code) + "\n  stdout: " + r.out.substr(0, 2000) +
         "\n  stderr: " + r.err.substr(0, 2000);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Given a master and two workers.
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
  }

  CliResult Cli(const std::vector<std::string>& args, std::string_view stdin_data = {}) {
    return cluster_.RunCli(args, stdin_data);
  }

  TestCluster cluster_;
};

TEST_F(CliTest, PutGetExistRemoveWithTheirExitCodes) {
  // When a value is put from the command line.
  auto put = Cli({"put", "greeting", "hello world"});
  EXPECT_EQ(put.exit_code, 0) << Show(put);

  // Expect get to print it, and exist to print 1.
  auto get = Cli({"get", "greeting"});
  EXPECT_EQ(get.exit_code, 0) << Show(get);
  EXPECT_TRUE(get.out == "hello world" || get.out == "hello world\n") << Show(get);
  auto exist = Cli({"exist", "greeting"});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  EXPECT_EQ(Trim(exist.out), "1") << Show(exist);

  // A second put of the key is refused with a clear message.
  auto again = Cli({"put", "greeting", "other"});
  EXPECT_NE(again.exit_code, 0) << Show(again);
  EXPECT_NE(Lower(again.err + again.out).find("already"), std::string::npos) << Show(again);

  // A missing key: exit 1 for get, exist (printing 0) and remove.
  auto missing_get = Cli({"get", "no-such-key"});
  EXPECT_EQ(missing_get.exit_code, 1) << Show(missing_get);
  auto missing_exist = Cli({"exist", "no-such-key"});
  EXPECT_EQ(missing_exist.exit_code, 1) << Show(missing_exist);
  EXPECT_EQ(Trim(missing_exist.out), "0") << Show(missing_exist);
  auto missing_remove = Cli({"remove", "no-such-key"});
  EXPECT_EQ(missing_remove.exit_code, 1) << Show(missing_remove);

  // A key just read holds a lease: plain remove is a server error naming
  // it, --force removes it.
  auto leased = Cli({"remove", "greeting"});
  EXPECT_EQ(leased.exit_code, 3) << Show(leased);
  EXPECT_NE(leased.err.find("OBJECT_HAS_LEASE"), std::string::npos) << Show(leased);
  auto remove = Cli({"remove", "greeting", "--force"});
  EXPECT_EQ(remove.exit_code, 0) << Show(remove);
  // A key nobody read is removed without --force.
  auto put_unread = Cli({"put", "unread", "v"});
  EXPECT_EQ(put_unread.exit_code, 0) << Show(put_unread);
  auto remove_unread = Cli({"remove", "unread"});
  EXPECT_EQ(remove_unread.exit_code, 0) << Show(remove_unread);

  // Expect removed keys gone.
  auto gone = Cli({"exist", "greeting"});
  EXPECT_EQ(gone.exit_code, 1) << Show(gone);
  EXPECT_EQ(Trim(gone.out), "0") << Show(gone);
  auto gone_get = Cli({"get", "greeting"});
  EXPECT_EQ(gone_get.exit_code, 1) << Show(gone_get);
}

TEST_F(CliTest, GetToFileAndPutFromFileOrStdinAreByteForByte) {
  const auto dir = cluster_.dir();
  // A value larger than one RPC chunk, with every byte value in it.
  const std::string big = PatternBytes(42, 2 * kRpcChunkBytes + 777);
  WriteFile(dir / "in.bin", big);

  // When a file is put with --file and read back with get -o.
  auto put_file = Cli({"put", "from-file", "--file", (dir / "in.bin").string()});
  ASSERT_EQ(put_file.exit_code, 0) << Show(put_file);
  auto get_file = Cli({"get", "from-file", "-o", (dir / "out.bin").string()});
  ASSERT_EQ(get_file.exit_code, 0) << Show(get_file);
  const std::string out = ReadFile(dir / "out.bin");
  EXPECT_EQ(out.size(), big.size());
  EXPECT_TRUE(out == big) << "get -o wrote different bytes";

  // When binary data is piped into put -.
  const std::string piped = std::string("line one\n\0\x01\xfe\xff", 14) + PatternBytes(43, 300000);
  auto put_stdin = Cli({"put", "from-stdin", "-"}, piped);
  ASSERT_EQ(put_stdin.exit_code, 0) << Show(put_stdin);
  auto get_stdin = Cli({"get", "from-stdin", "-o", (dir / "stdin.bin").string()});
  ASSERT_EQ(get_stdin.exit_code, 0) << Show(get_stdin);
  EXPECT_TRUE(ReadFile(dir / "stdin.bin") == piped) << "stdin round trip differs";

  // Expect a C++ client to read the same bytes the CLI wrote.
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  auto got = client->Get("from-file");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == big);
}

TEST_F(CliTest, NodeFlagPlacesTheObjectAndStatsAndNodesReport) {
  auto put = Cli({"--node", "w2", "put", "placed", "on-w2"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  auto info = client->Inspect("placed");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w2");

  auto nodes = Cli({"--json", "nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << Show(nodes);
  const std::string json = Trim(nodes.out);
  EXPECT_TRUE(!json.empty() && (json.front() == '[' || json.front() == '{')) << Show(nodes);
  EXPECT_NE(json.find("w1"), std::string::npos) << Show(nodes);
  EXPECT_NE(json.find("w2"), std::string::npos) << Show(nodes);

  auto stats = Cli({"stats", "--node", "w2"});
  EXPECT_EQ(stats.exit_code, 0) << Show(stats);
  EXPECT_NE(Lower(stats.out).find("dram"), std::string::npos) << Show(stats);
  auto unknown = Cli({"stats", "--node", "no-such-node"});
  EXPECT_NE(unknown.exit_code, 0) << Show(unknown);
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},                   // no subcommand
           {"frobnicate", "k"},  // unknown subcommand
           {"get"},              // missing key
           {"put"},              // missing key
           {"exist"},            // missing key
           {"get", "k", "--no-such-flag"},
       }) {
    auto r = Cli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << "mooncake-cli " << joined << "\n" << Show(r);
  }
  // --master that is not HOST:PORT is a usage error too.
  auto bad_master = cluster_.RunCli({"--master", "not-an-address", "get", "k"}, {}, false);
  EXPECT_EQ(bad_master.exit_code, 2) << Show(bad_master);
}

TEST_F(CliTest, DashHIsAUsageErrorWithAHintAndVersionPrintsOneLine) {
  // redis-cli habits: -h HOST is not help and not the master.
  auto h = Cli({"-h", "127.0.0.1", "nodes"});
  EXPECT_EQ(h.exit_code, 2) << Show(h);
  EXPECT_NE(h.err.find("use --master HOST:PORT; --help for help"), std::string::npos) << Show(h);
  auto help = Cli({"--help"});
  EXPECT_EQ(help.exit_code, 0) << Show(help);
  EXPECT_NE(help.out.find("Usage:"), std::string::npos) << Show(help);

  auto version = cluster_.RunCli({"--version"}, {}, false);
  EXPECT_EQ(version.exit_code, 0) << Show(version);
  EXPECT_TRUE(version.out.starts_with("mooncake-cli ")) << Show(version);
  EXPECT_EQ(std::count(version.out.begin(), version.out.end(), '\n'), 1) << Show(version);
}

TEST_F(CliTest, ConfigFileKeysAndItsMistakes) {
  // The harness points XDG_CONFIG_HOME into the cluster's dir.
  const auto config_dir = cluster_.dir() / "xdg-config" / "mooncake";
  std::filesystem::create_directories(config_dir);
  const auto config = config_dir / "cli.toml";
  WriteFile(config, "master = \"" + cluster_.master_address() + "\"\nnode = \"w2\"\njson = true\n");
  auto put = cluster_.RunCli({"put", "from-config", "v"}, {}, false);
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  EXPECT_NE(put.out.find("\"ok\":true"), std::string::npos) << Show(put);  // json = true
  auto stats = cluster_.RunCli({"stats"}, {}, false);                      // node = "w2"
  EXPECT_EQ(stats.exit_code, 0) << Show(stats);
  EXPECT_NE(stats.out.find("\"node_id\":\"w2\""), std::string::npos) << Show(stats);

  // An unknown key, a YAML file and garbage are usage errors, never ignored.
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"master = \"" + cluster_.master_address() + "\"\nmastr = \"x\"\n", "'mastr'"},
           {"master: " + cluster_.master_address() + "\n", "not `key = value`"},
           {std::string("\x01\x02\xff\xfe", 4), "config file"}}) {
    WriteFile(config, text);
    auto r = cluster_.RunCli({"nodes"}, {}, false);
    EXPECT_EQ(r.exit_code, 2) << Show(r);
    EXPECT_NE(r.err.find(expected), std::string::npos) << Show(r);
    EXPECT_NE(r.err.find(config.string()), std::string::npos) << Show(r);
  }
  // --config names another file; a flag still wins over the file.
  const auto other = cluster_.dir() / "other.toml";
  WriteFile(other, "master = \"127.0.0.1:1\"\n");
  auto flag_wins = cluster_.RunCli({"--config", other.string(), "exist", "from-config"});
  EXPECT_EQ(flag_wins.exit_code, 0) << Show(flag_wins);
}

TEST_F(CliTest, UnreachableMasterExitsThree) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(UnusedPort());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", "k"}, {"put", "k", "v"}, {"exist", "k"}, {"remove", "k"}, {"nodes"}}) {
    std::vector<std::string> full = {"--master", nowhere};
    full.insert(full.end(), args.begin(), args.end());
    auto r = cluster_.RunCli(full, {}, false, {}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 3) << args[0] << "\n" << Show(r);
    EXPECT_FALSE(r.err.empty()) << args[0] << ": no message on stderr";
  }
}

TEST_F(CliTest, MasterAddressComesFromTheEnvironment) {
  const std::string env = "MOONCAKE_MASTER=" + cluster_.master_address();
  auto put = cluster_.RunCli({"put", "via-env", "v"}, {}, false, {env});
  EXPECT_EQ(put.exit_code, 0) << Show(put);
  auto exist = cluster_.RunCli({"exist", "via-env"}, {}, false, {env});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  EXPECT_EQ(Trim(exist.out), "1") << Show(exist);
}

}  // namespace
}  // namespace mooncake::testing
