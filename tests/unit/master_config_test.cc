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

TEST(MasterConfigTest, RejectsOutOfRangeValues) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* mentions;
  };
  for (const Case& c :
       {Case{{"--port", "65536"}, "--port"}, Case{{"--port", "-1"}, "--port"},
        Case{{"--port", "abc"}, "--port"}, Case{{"--node-ttl-ms", "0"}, "--node-ttl-ms"},
        Case{{"--node-ttl-ms", "-5"}, "--node-ttl-ms"},
        Case{{"--log-level", "loud"}, "--log-level"}, Case{{"--host", ""}, "--host"}}) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << c.mentions;
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
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
                           "--ready-file", "--log-level", "info", "--config"}) {
    EXPECT_NE(message.find(text), std::string::npos) << text << " missing from:\n" << message;
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

}  // namespace
}  // namespace mooncake
