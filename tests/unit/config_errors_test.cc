// The wording of config errors (common/flag_parsing.h ExplainParseError),
// --version through ParseFlags, and the worker's environment variables and
// their precedence.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/version.h"
#include "master/master_config.h"
#include "worker/worker_config.h"

namespace mooncake {
namespace {

Result<WorkerConfig> ParseWorker(std::initializer_list<const char*> args, std::string* message) {
  std::vector<const char*> argv = {"mooncake-worker"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseWorkerConfig(static_cast<int>(argv.size()), argv.data(), message);
}

Result<MasterConfig> ParseMaster(std::initializer_list<const char*> args, std::string* message) {
  std::vector<const char*> argv = {"mooncake-master"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseMasterConfig(static_cast<int>(argv.size()), argv.data(), message);
}

// A config file in the temp dir, removed when the test ends.
class TempConfig {
 public:
  explicit TempConfig(const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              ("config_errors_test_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".toml")) {
    std::ofstream(path_) << text;
  }
  ~TempConfig() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ConfigErrorsTest, UnknownKeyNamesTheFileTheKeyAndTheFlagItMeant) {
  TempConfig file("node_id = \"w1\"\n");
  std::string message;
  auto config = ParseWorker({"--config", file.path().c_str()}, &message);
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("config file " + file.path() +
                         ": unknown key \"node_id\" (keys are the long flag names without "
                         "dashes, e.g. node-id)"),
            std::string::npos)
      << message;
}

TEST(ConfigErrorsTest, UnknownKeyWithoutALikelyFlagStillShowsTheForm) {
  TempConfig file("bogus = 1\n");
  std::string message;
  ASSERT_FALSE(ParseMaster({"--config", file.path().c_str()}, &message));
  EXPECT_NE(message.find("unknown key \"bogus\""), std::string::npos) << message;
  EXPECT_NE(message.find("e.g. log-level"), std::string::npos) << message;
}

// A "[worker]" line used to give `unknown key "worker.++"`, CLI11's internal
// name for a section start, which told the user nothing.
TEST(ConfigErrorsTest, ASectionInAConfigFileSaysSectionsAreNotSupported) {
  TempConfig worker_file("[worker]\ndram-capacity = \"32MiB\"\n");
  std::string message;
  ASSERT_FALSE(ParseWorker({"--config", worker_file.path().c_str()}, &message));
  EXPECT_NE(message.find("config file " + worker_file.path() +
                         ": sections are not supported (found [worker]); write every key at the "
                         "top level of the file, with no [section] line and no \"section.\" "
                         "prefix"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("++"), std::string::npos) << message;

  TempConfig master_file("port = 0\n[master]\nlog-level = \"debug\"\n");
  ASSERT_FALSE(ParseMaster({"--config", master_file.path().c_str()}, &message));
  EXPECT_NE(message.find("sections are not supported (found [master])"), std::string::npos)
      << message;

  TempConfig dotted("worker.port = 7000\n");
  ASSERT_FALSE(ParseWorker({"--config", dotted.path().c_str()}, &message));
  EXPECT_NE(message.find("sections are not supported (found [worker] with key \"port\")"),
            std::string::npos)
      << message;
}

// CLI11 2.1 cut a value at its first '#', quoted or not, and kept the
// opening quote: ssd-path moved to a relative directory named `"/tmp/nvme`
// and the admin token became the one character `"`.
TEST(ConfigErrorsTest, AHashInsideQuotesIsPartOfTheValue) {
  TempConfig worker_file(
      "node-id = \"gpu#7\"   # the node\n"
      "ssd-path = '/tmp/nvme#1/ssd'  # single quotes\n"
      "admin-token = \"#Zx9-very-long-random-secret\"\n"
      "log-level = \"debug\" # a comment after a value is still a comment\n"
      "port = 7001 # and after a number\n"
      "# a whole line, with \"quotes # inside\n");
  std::string message;
  auto worker = ParseWorker({"--config", worker_file.path().c_str()}, &message);
  ASSERT_TRUE(worker) << message;
  EXPECT_EQ(worker->node_id, "gpu#7");
  EXPECT_EQ(worker->ssd_path, "/tmp/nvme#1/ssd");
  EXPECT_EQ(worker->admin_token, "#Zx9-very-long-random-secret");
  EXPECT_EQ(worker->log_level, "debug");
  EXPECT_EQ(worker->port, 7001);

  TempConfig master_file(
      "admin-token = \"#Zx9-very-long-random-secret\"  # keep it\n"
      "cluster-name = \"prod#2\"\n"
      "port = 0\n");
  auto master = ParseMaster({"--config", master_file.path().c_str()}, &message);
  ASSERT_TRUE(master) << message;
  EXPECT_EQ(master->admin_token, "#Zx9-very-long-random-secret");
  EXPECT_EQ(master->cluster_name, "prod#2");
}

// A quoted value means what TOML says. CLI11 2.1 decoded `\"` only in a
// value with a space and never `\\`: `admin-token = "s3cr\\et"` guarded the
// admin port with two backslashes, and `"in\"fo"` kept its backslash.
TEST(ConfigErrorsTest, DoubleQuotedValuesDecodeTomlEscapesAndSingleQuotedOnesAreVerbatim) {
  TempConfig worker_file(
      "node-id = \"in\\\\fo\"\n"
      "admin-token = \"in\\\"fo\"\n"
      "ssd-path = \"/tmp/in \\\"fo\"\n"
      "log-level = \"de\\u0062ug\"\n");
  std::string message;
  auto worker = ParseWorker({"--config", worker_file.path().c_str()}, &message);
  ASSERT_TRUE(worker) << message;
  EXPECT_EQ(worker->node_id, "in\\fo");
  EXPECT_EQ(worker->admin_token, "in\"fo");
  EXPECT_EQ(worker->ssd_path, "/tmp/in \"fo");
  EXPECT_EQ(worker->log_level, "debug");

  TempConfig master_file(
      "admin-token = 'C:\\dir\\\\x\"q\"'\n"
      "cluster-name = \"s3cr\\\\et\\t\\u00e9\\U0001F600\"\n"
      "port = 0\n");
  auto master = ParseMaster({"--config", master_file.path().c_str()}, &message);
  ASSERT_TRUE(master) << message;
  EXPECT_EQ(master->admin_token, "C:\\dir\\\\x\"q\"");
  EXPECT_EQ(master->cluster_name, "s3cr\\et\t\xC3\xA9\xF0\x9F\x98\x80");
}

// An escape TOML does not have is a usage error naming the file and the
// line, not a value kept or changed silently.
TEST(ConfigErrorsTest, AnInvalidEscapeIsAnErrorNamingTheFileAndTheLine) {
  TempConfig worker_file("port = 7001\nssd-path = \"C:\\data\"\n");
  std::string message;
  auto worker = ParseWorker({"--config", worker_file.path().c_str()}, &message);
  ASSERT_FALSE(worker);
  EXPECT_EQ(worker.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("config file " + worker_file.path() + ": line 2: invalid escape \\d"),
            std::string::npos)
      << message;

  TempConfig master_file("admin-token = \"\\u12\"\n");
  ASSERT_FALSE(ParseMaster({"--config", master_file.path().c_str()}, &message));
  EXPECT_NE(message.find("config file " + master_file.path() + ": line 1: the escape \\u needs"),
            std::string::npos)
      << message;
}

// A quote with no closing one on its line is refused, naming the file and
// the line, rather than run with a value cut short.
TEST(ConfigErrorsTest, AStringLeftOpenIsAnErrorNamingTheFileAndTheLine) {
  TempConfig worker_file("port = 7001\nssd-path = \"/tmp/nvme#1/ssd\n");
  std::string message;
  auto worker = ParseWorker({"--config", worker_file.path().c_str()}, &message);
  ASSERT_FALSE(worker);
  EXPECT_EQ(worker.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("config file " + worker_file.path() +
                         ": line 2: the string opened with \" is not closed on its line"),
            std::string::npos)
      << message;

  TempConfig master_file("admin-token = '#secret\n");
  ASSERT_FALSE(ParseMaster({"--config", master_file.path().c_str()}, &message));
  EXPECT_NE(message.find("config file " + master_file.path() + ": line 1:"), std::string::npos)
      << message;
}

// Config and token files are read with a bound (common/file_read.h): a file
// named by mistake (a model, /dev/zero) is a config error naming it, not an
// allocation that ends in std::bad_alloc and exit 134.
TEST(ConfigErrorsTest, ConfigAndTokenFilesOverTheirLimitAreConfigErrors) {
  TempConfig big(std::string(2 << 20, '#') + "\n");
  std::string message;
  ASSERT_FALSE(ParseWorker({"--config", big.path().c_str()}, &message));
  EXPECT_NE(message.find("config file " + big.path() + ": holds more than 1.0 MiB"),
            std::string::npos)
      << message;
  ASSERT_FALSE(ParseMaster({"--config", big.path().c_str()}, &message));
  EXPECT_NE(message.find("holds more than 1.0 MiB"), std::string::npos) << message;

  TempConfig token(std::string(8 << 10, 'a'));
  auto worker = ParseWorker({"--admin-token-file", token.path().c_str()}, &message);
  ASSERT_FALSE(worker);
  EXPECT_EQ(worker.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("--admin-token-file: \"" + token.path() + "\" holds more than 4.0 KiB"),
            std::string::npos)
      << message;
  ASSERT_FALSE(ParseMaster({"--admin-token-file", token.path().c_str()}, &message));
  EXPECT_NE(message.find("--admin-token-file: \"" + token.path() + "\" holds more than 4.0 KiB"),
            std::string::npos)
      << message;

  // At the limits they are read as before.
  TempConfig full_config(std::string((1 << 20) - 16, '#') + "\nport = 7001\n");
  auto worker_ok = ParseWorker({"--config", full_config.path().c_str()}, &message);
  ASSERT_TRUE(worker_ok) << message;
  EXPECT_EQ(worker_ok->port, 7001);
  TempConfig full_token(std::string(4 << 10, 'b'));
  auto master_ok = ParseMaster({"--admin-token-file", full_token.path().c_str()}, &message);
  ASSERT_TRUE(master_ok) << message;
  EXPECT_EQ(master_ok->admin_token, std::string(4 << 10, 'b'));
}

TEST(ConfigErrorsTest, BadSizeNamesTheFlagTheFormAndTheValue) {
  std::string message;
  ASSERT_FALSE(ParseWorker({"--dram-capacity", "lots"}, &message));
  EXPECT_NE(message.find("--dram-capacity: expected a size like 64MiB, got \"lots\""),
            std::string::npos)
      << message;
  TempConfig file("ssd-capacity = \"huge\"\n");
  ASSERT_FALSE(ParseWorker({"--config", file.path().c_str()}, &message));
  EXPECT_NE(message.find("--ssd-capacity: expected a size like 64MiB, got \"huge\""),
            std::string::npos)
      << message;
}

TEST(ConfigErrorsTest, BadNumbersNameTheFlagTheFormAndTheValue) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* expected;
  };
  for (const Case& c : {
           Case{{"--port", "abc"}, "--port: expected an integer, got \"abc\""},
           Case{{"--high-watermark", "most"},
                "--high-watermark: expected a number like 0.5, got "
                "\"most\""},
           Case{{"--promote-on-get", "maybe"},
                "--promote-on-get: expected true or false, got "
                "\"maybe\""},
       }) {
    std::string message;
    ASSERT_FALSE(ParseWorker(c.args, &message)) << c.expected;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
  std::string message;
  ASSERT_FALSE(ParseMaster({"--node-ttl-ms", "soon"}, &message));
  EXPECT_NE(message.find("--node-ttl-ms: expected an integer, got \"soon\""), std::string::npos)
      << message;
}

TEST(ConfigErrorsTest, VersionIsLikeHelp) {
  std::string message;
  auto worker = ParseWorker({"--version"}, &message);
  ASSERT_TRUE(worker) << message;
  EXPECT_TRUE(worker->show_help);
  EXPECT_EQ(message, VersionLine("mooncake-worker") + "\n");
  auto master = ParseMaster({"--version"}, &message);
  ASSERT_TRUE(master) << message;
  EXPECT_TRUE(master->show_help);
  EXPECT_EQ(message, VersionLine("mooncake-master") + "\n");
}

TEST(ConfigErrorsTest, EnvironmentSetsMasterAndNodeId) {
  ScopedEnv master("MOONCAKE_MASTER", "10.0.0.1:7000");
  ScopedEnv node("MOONCAKE_NODE_ID", "env-node");
  std::string message;
  auto config = ParseWorker({}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->master, "10.0.0.1:7000");
  EXPECT_EQ(config->node_id, "env-node");
}

TEST(ConfigErrorsTest, FlagsAndConfigFileWinOverTheEnvironment) {
  ScopedEnv master("MOONCAKE_MASTER", "10.0.0.1:7000");
  ScopedEnv node("MOONCAKE_NODE_ID", "env-node");
  std::string message;
  auto flags = ParseWorker({"--master", "10.0.0.2:7000", "--node-id", "flag-node"}, &message);
  ASSERT_TRUE(flags) << message;
  EXPECT_EQ(flags->master, "10.0.0.2:7000");
  EXPECT_EQ(flags->node_id, "flag-node");

  TempConfig file("master = \"10.0.0.3:7000\"\n");
  auto from_file = ParseWorker({"--config", file.path().c_str()}, &message);
  ASSERT_TRUE(from_file) << message;
  EXPECT_EQ(from_file->master, "10.0.0.3:7000");  // CLI11 2.1: config file before env
  EXPECT_EQ(from_file->node_id, "env-node");
}

// --master, --etcd and --master-shards are one setting: an environment
// variable for etcd or shards (set for a host's clients, say) never beats a
// --master given as a flag or a file key. It did: the worker joined the
// cluster of MOONCAKE_ETCD and never registered with --master.
TEST(ConfigErrorsTest, AnExplicitMasterBeatsEtcdAndShardsFromTheEnvironment) {
  ScopedEnv etcd("MOONCAKE_ETCD", "http://127.0.0.1:2379");
  std::string message;
  auto flag = ParseWorker({"--master", "10.0.0.1:50051"}, &message);
  ASSERT_TRUE(flag) << message;
  EXPECT_EQ(flag->etcd, "");
  EXPECT_EQ(flag->master, "10.0.0.1:50051");
  EXPECT_EQ(flag->master_description(), "10.0.0.1:50051");

  TempConfig file("master = \"10.0.0.3:7000\"\n");
  auto from_file = ParseWorker({"--config", file.path().c_str()}, &message);
  ASSERT_TRUE(from_file) << message;
  EXPECT_EQ(from_file->etcd, "");
  EXPECT_EQ(from_file->master, "10.0.0.3:7000");

  {
    ScopedEnv shards("MOONCAKE_MASTER_SHARDS", "127.0.0.1:1,127.0.0.1:2");
    auto over_shards = ParseWorker({"--master", "10.0.0.1:50051"}, &message);
    ASSERT_TRUE(over_shards) << message;
    EXPECT_EQ(over_shards->master_shards, "");
    EXPECT_EQ(over_shards->master_description(), "10.0.0.1:50051");
  }

  // Alone, the environment still decides.
  auto env_only = ParseWorker({}, &message);
  ASSERT_TRUE(env_only) << message;
  EXPECT_EQ(env_only->etcd, "http://127.0.0.1:2379");
}

// The same between a flag and a file key, and a master address that is not
// used is not checked.
TEST(ConfigErrorsTest, TheMasterSettingComesFromOneSourceAndIsCheckedOnlyWhenUsed) {
  TempConfig file("etcd = \"http://127.0.0.1:2379\"\n");
  std::string message;
  auto flag_over_file =
      ParseWorker({"--config", file.path().c_str(), "--master=10.0.0.1:50051"}, &message);
  ASSERT_TRUE(flag_over_file) << message;
  EXPECT_EQ(flag_over_file->etcd, "");
  EXPECT_EQ(flag_over_file->master, "10.0.0.1:50051");

  ScopedEnv bogus("MOONCAKE_MASTER", "bogus");
  auto etcd_flag = ParseWorker({"--etcd", "http://127.0.0.1:2379"}, &message);
  ASSERT_TRUE(etcd_flag) << message;
  EXPECT_EQ(etcd_flag->etcd, "http://127.0.0.1:2379");
  // Used, it is checked.
  EXPECT_FALSE(ParseWorker({}, &message));
  EXPECT_NE(message.find("--master must be HOST:PORT, got \"bogus\""), std::string::npos)
      << message;
}

TEST(ConfigErrorsTest, HelpNamesTheEnvironmentVariables) {
  std::string message;
  auto config = ParseWorker({"--help"}, &message);
  ASSERT_TRUE(config);
  EXPECT_NE(message.find("MOONCAKE_MASTER"), std::string::npos) << message;
  EXPECT_NE(message.find("MOONCAKE_NODE_ID"), std::string::npos) << message;
  EXPECT_NE(message.find("--version"), std::string::npos) << message;
}

}  // namespace
}  // namespace mooncake
