#include "master/master_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace mooncake {
namespace {

// Runs ParseMasterConfig on "mooncake-master" followed by `args`.
Result<MasterConfig> Parse(std::initializer_list<const char*> args, std::string* message) {
  std::vector<const char*> argv = {"mooncake-master"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseMasterConfig(static_cast<int>(argv.size()), argv.data(), message);
}

// A config file in the test's temp dir, removed when the test ends.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              ("master_config_test_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".toml")) {
    std::ofstream(path_) << text;
  }
  ~ConfigFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(MasterConfigTest, DefaultsWithoutFlags) {
  std::string message;
  auto config = Parse({}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->host, "127.0.0.1");
  EXPECT_EQ(config->port, 50051);
  EXPECT_EQ(config->node_ttl_ms, 10000);
  EXPECT_EQ(config->ready_file, "");
  EXPECT_EQ(config->log_level, "info");
  EXPECT_EQ(config->admin_host, "127.0.0.1");
  EXPECT_EQ(config->admin_port, 50050);
  EXPECT_EQ(config->admin_token, "");
  EXPECT_EQ(config->admin_token_file, "");
  // The master polls for its workers' claims longer than they poll for it.
  EXPECT_EQ(config->rpc_limits.poll_us, kDefaultMasterRpcPollUs);
  EXPECT_GT(config->rpc_limits.poll_us, kDefaultRpcPollUs);
  EXPECT_FALSE(config->show_help);
}

TEST(MasterConfigTest, FlagsOverrideDefaults) {
  std::string message;
  auto config = Parse({"--host", "0.0.0.0", "--port", "0", "--node-ttl-ms", "2500", "--ready-file",
                       "/tmp/ready", "--log-level", "debug"},
                      &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->host, "0.0.0.0");
  EXPECT_EQ(config->port, 0);
  EXPECT_EQ(config->node_ttl_ms, 2500);
  EXPECT_EQ(config->ready_file, "/tmp/ready");
  EXPECT_EQ(config->log_level, "debug");
}

TEST(MasterConfigTest, ConfigFileUsesFlagNamesAndFlagsWin) {
  ConfigFile file("host = \"10.0.0.1\"\nport = 6000\nnode-ttl-ms = 3000\nlog-level = \"warn\"\n");
  std::string message;
  auto config = Parse({"--config", file.path().c_str(), "--port", "7000"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->host, "10.0.0.1");
  EXPECT_EQ(config->port, 7000);  // the command line beats the file
  EXPECT_EQ(config->node_ttl_ms, 3000);
  EXPECT_EQ(config->log_level, "warn");
}

TEST(MasterConfigTest, ConfigFileValuesAreValidated) {
  ConfigFile file("port = 70000\n");
  std::string message;
  auto config = Parse({"--config", file.path().c_str()}, &message);
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("--port"), std::string::npos) << message;
}

TEST(MasterConfigTest, UnknownConfigFileKeyIsRejected) {
  ConfigFile file("prot = 6000\n");
  std::string message;
  EXPECT_FALSE(Parse({"--config", file.path().c_str()}, &message));
  EXPECT_NE(message.find("prot"), std::string::npos) << message;
}

TEST(MasterConfigTest, MissingConfigFileIsRejected) {
  std::string message;
  EXPECT_FALSE(Parse({"--config", "/nonexistent/master.toml"}, &message));
  EXPECT_FALSE(message.empty());
}

// Every master rebuilds its directory after a start (docs/operations.md):
// --rebuild-ms sets the window for all masters; --ha-rebuild-ms, its name
// when only HA masters had one, still sets it, on the command line and in
// a config file.
TEST(MasterConfigTest, RebuildWindowDefaultsTo2500MsUnderEitherName) {
  std::string message;
  auto defaults = Parse({}, &message);
  ASSERT_TRUE(defaults) << message;
  EXPECT_EQ(defaults->rebuild_ms, 2500);
  auto named = Parse({"--rebuild-ms", "4000"}, &message);
  ASSERT_TRUE(named) << message;
  EXPECT_EQ(named->rebuild_ms, 4000);
  auto old_name = Parse({"--ha-rebuild-ms", "0"}, &message);
  ASSERT_TRUE(old_name) << message;
  EXPECT_EQ(old_name->rebuild_ms, 0);
  for (const char* key : {"rebuild-ms", "ha-rebuild-ms"}) {
    ConfigFile file(std::string(key) + " = 1234\n");
    auto from_file = Parse({"--config", file.path().c_str()}, &message);
    ASSERT_TRUE(from_file) << key << ": " << message;
    EXPECT_EQ(from_file->rebuild_ms, 1234) << key;
  }
  for (const char* bad : {"-1", "60001"}) {
    EXPECT_FALSE(Parse({"--rebuild-ms", bad}, &message)) << bad;
    EXPECT_NE(message.find("--rebuild-ms"), std::string::npos) << message;
  }
}

TEST(MasterConfigTest, RejectsOutOfRangeValues) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* mentions;
  };
  for (const Case& c :
       {Case{{"--port", "65536"}, "--port"}, Case{{"--port", "-1"}, "--port"},
        Case{{"--port", "abc"}, "--port"}, Case{{"--node-ttl-ms", "0"}, "--node-ttl-ms"},
        Case{{"--node-ttl-ms", "-5"}, "--node-ttl-ms"},
        Case{{"--node-ttl-ms", "10000000000000"}, "--node-ttl-ms"},
        Case{{"--log-level", "loud"}, "--log-level"}, Case{{"--host", ""}, "--host"},
        Case{{"--admin-port", "-2"}, "--admin-port"},
        Case{{"--admin-port", "65536"}, "--admin-port"},
        Case{{"--admin-port", "x"}, "--admin-port"},
        Case{{"--port", "7000", "--admin-port", "7000"}, "--admin-port"},
        Case{{"--admin-host", ""}, "--admin-host"},
        Case{{"--admin-token", "has space"}, "--admin-token"}}) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << c.mentions;
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
  }
}

// The address published in etcd as the leader's: "host:abc" used to pass (only
// a colon was checked) and would have sent every worker to a port that does
// not exist.
TEST(MasterConfigTest, AdvertiseAddressNeedsANumericPort) {
  for (const char* bad :
       {"host:abc", "host:0", "host:65536", "host:5x", "host:", ":7000", "host", "host:-1"}) {
    std::string message;
    auto config = Parse({"--etcd", "http://127.0.0.1:2379", "--advertise-address", bad}, &message);
    ASSERT_FALSE(config) << bad;
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find("--advertise-address must be HOST:PORT with a port in 1..65535, got \"" +
                           std::string(bad) + "\""),
              std::string::npos)
        << message;
  }
  for (const char* good : {"10.0.0.5:7000", "[::1]:1", "master-1.example:65535"}) {
    std::string message;
    auto config = Parse({"--etcd", "http://127.0.0.1:2379", "--advertise-address", good}, &message);
    ASSERT_TRUE(config) << good << ": " << message;
    EXPECT_EQ(config->advertise_address, good);
  }
}

TEST(MasterConfigTest, RejectsUnknownFlagsAndPositionals) {
  std::string message;
  EXPECT_FALSE(Parse({"--bogus", "1"}, &message));
  EXPECT_FALSE(message.empty());
  message.clear();
  EXPECT_FALSE(Parse({"stray"}, &message));
  EXPECT_FALSE(message.empty());
}

TEST(MasterConfigTest, HelpListsFlagsWithDefaults) {
  std::string message;
  auto config = Parse({"--help"}, &message);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->show_help);
  for (const char* text : {"--host", "127.0.0.1", "--port", "50051", "--node-ttl-ms", "10000",
                           "--ready-file", "--log-level", "info", "--config", "--admin-host",
                           "--admin-port", "50050", "--admin-token", "--admin-token-file"}) {
    EXPECT_NE(message.find(text), std::string::npos) << text << " missing from:\n" << message;
  }
  // The master's own poll default, on the flag's line.
  size_t flag = message.find("--rpc-poll-us");
  ASSERT_NE(flag, std::string::npos) << message;
  std::string line = message.substr(flag, message.find('\n', flag) - flag);
  EXPECT_NE(line.find("200"), std::string::npos) << line;
}

TEST(MasterConfigTest, DeadNodeForgetMsIsBoundedAndZeroMeansNever) {
  std::string message;
  auto defaults = Parse({}, &message);
  ASSERT_TRUE(defaults) << message;
  EXPECT_EQ(defaults->dead_node_forget_ms, 3600000);
  for (const char* value : {"0", "600000", "2592000000"}) {
    auto config = Parse({"--dead-node-forget-ms", value}, &message);
    ASSERT_TRUE(config) << value << ": " << message;
    EXPECT_EQ(config->dead_node_forget_ms, std::stoll(value));
  }
  for (const char* value : {"-1", "2592000001"}) {
    EXPECT_FALSE(Parse({"--dead-node-forget-ms", value}, &message)) << value;
    EXPECT_NE(message.find("--dead-node-forget-ms must be in 0..2592000000"), std::string::npos)
        << message;
  }
}

TEST(MasterConfigTest, ValidateAcceptsDefaultsAndNullMessage) {
  EXPECT_TRUE(ValidateMasterConfig(MasterConfig{}, nullptr));
  MasterConfig bad;
  bad.node_ttl_ms = 0;
  EXPECT_EQ(ValidateMasterConfig(bad, nullptr).error(), ErrorCode::kInvalidParams);
  EXPECT_FALSE(Parse({"--port", "99999"}, nullptr));
  EXPECT_TRUE(Parse({"--help"}, nullptr));
}

TEST(MasterConfigTest, AdminFlagsParse) {
  std::string message;
  auto config = Parse(
      {"--admin-host", "0.0.0.0", "--admin-port", "6100", "--admin-token", "abc.DEF-1"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_host, "0.0.0.0");
  EXPECT_EQ(config->admin_port, 6100);
  EXPECT_EQ(config->admin_token, "abc.DEF-1");
  for (const char* port : {"-1", "0", "65535"}) {
    auto edge = Parse({"--admin-port", port}, &message);
    ASSERT_TRUE(edge) << port << ": " << message;
    EXPECT_EQ(edge->admin_port, std::stoi(port));
  }
}

TEST(MasterConfigTest, FreeRpcPortMeansFreeAdminPortUnlessGiven) {
  std::string message;
  auto config = Parse({"--port", "0"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_port, kDefaultAdminPort);
  EXPECT_EQ(EffectiveAdminPort(*config), 0);
  config = Parse({"--port", "0", "--admin-port", "6200"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(EffectiveAdminPort(*config), 6200);
  config = Parse({"--port", "0", "--admin-port", "-1"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(EffectiveAdminPort(*config), -1);
  config = Parse({"--port", "7000"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(EffectiveAdminPort(*config), kDefaultAdminPort);
  ConfigFile file("port = 0\nadmin-port = 6300\n");
  config = Parse({"--config", file.path().c_str()}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(EffectiveAdminPort(*config), 6300);
}

TEST(MasterConfigTest, AdminTokenFileIsReadTrimmedAndTheFlagWins) {
  ConfigFile token("  tok-from-file\n\n");
  std::string message;
  auto config = Parse({"--admin-token-file", token.path().c_str()}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_token, "tok-from-file");
  EXPECT_EQ(config->admin_token_file, token.path());

  config =
      Parse({"--admin-token-file", token.path().c_str(), "--admin-token", "from-flag"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_token, "from-flag");
}

TEST(MasterConfigTest, UnreadableOrEmptyTokenFileIsAConfigError) {
  std::string message;
  auto config = Parse({"--admin-token-file", "/nonexistent/token"}, &message);
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("--admin-token-file"), std::string::npos) << message;

  ConfigFile blank(" \n\t\n");
  message.clear();
  config = Parse({"--admin-token-file", blank.path().c_str()}, &message);
  ASSERT_FALSE(config);
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
}

TEST(MasterConfigTest, TokenFileWithSpacesInsideIsRejected) {
  ConfigFile spaced("two words\n");
  std::string message;
  EXPECT_FALSE(Parse({"--admin-token-file", spaced.path().c_str()}, &message));
  EXPECT_NE(message.find("--admin-token"), std::string::npos) << message;
}

TEST(MasterConfigTest, LoadAdminTokenLeavesAGivenTokenAlone) {
  MasterConfig config;
  config.admin_token = "given";
  config.admin_token_file = "/nonexistent/token";
  ASSERT_TRUE(LoadAdminToken(config, nullptr));
  EXPECT_EQ(config.admin_token, "given");
  config.admin_token.clear();
  EXPECT_FALSE(LoadAdminToken(config, nullptr));
}

}  // namespace
}  // namespace mooncake
