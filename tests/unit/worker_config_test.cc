#include "worker/worker_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace mooncake {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// Runs ParseWorkerConfig on "mooncake-worker" followed by `args`.
Result<WorkerConfig> Parse(std::initializer_list<const char*> args, std::string* message) {
  std::vector<const char*> argv = {"mooncake-worker"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseWorkerConfig(static_cast<int>(argv.size()), argv.data(), message);
}

// A file in the temp dir, removed when the test ends. `tag` tells apart
// several files of one test.
class TempFile {
 public:
  explicit TempFile(const std::string& text, const std::string& tag = "cfg")
      : path_(std::filesystem::temp_directory_path() /
              ("worker_config_test_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + tag +
               ".toml")) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(WorkerConfigTest, DefaultsWithoutFlags) {
  std::string message;
  auto config = Parse({}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->node_id, "");
  EXPECT_EQ(config->host, "127.0.0.1");
  EXPECT_EQ(config->advertise_host, "");
  EXPECT_EQ(config->port, 50061);
  EXPECT_EQ(config->master, "127.0.0.1:50051");
  EXPECT_EQ(config->master_host(), "127.0.0.1");
  EXPECT_EQ(config->master_port(), 50051);
  EXPECT_EQ(config->dram_capacity, 256 * kMiB);
  EXPECT_EQ(config->ssd_capacity, kGiB);
  EXPECT_EQ(config->ssd_path, "./var/worker/ssd");
  EXPECT_DOUBLE_EQ(config->high_watermark, 0.90);
  EXPECT_DOUBLE_EQ(config->low_watermark, 0.80);
  EXPECT_EQ(config->heartbeat_interval_ms, 1000);
  EXPECT_TRUE(config->promote_on_get);
  EXPECT_TRUE(config->allow_evict_soft_pinned);
  EXPECT_EQ(config->kv_lease_ttl_ms, 10000);
  EXPECT_EQ(config->soft_pin_ttl_ms, 30 * 60 * 1000);
  EXPECT_EQ(config->put_start_discard_timeout_ms, 30000);
  EXPECT_TRUE(config->hard_pin_write_through);
  EXPECT_TRUE(config->inter_node_eviction);
  EXPECT_EQ(config->adopt_confirm_delay_ms, 30000);
  EXPECT_EQ(config->test_crash_at, "");
  EXPECT_EQ(config->ready_file, "");
  EXPECT_EQ(config->admin_host, "127.0.0.1");
  EXPECT_EQ(config->admin_port, kDefaultWorkerAdminPort);
  EXPECT_EQ(config->admin_port, 50060);
  EXPECT_EQ(config->admin_token, "");
  EXPECT_EQ(config->admin_token_file, "");
  EXPECT_EQ(config->log_level, "info");
  EXPECT_FALSE(config->show_help);
}

TEST(WorkerConfigTest, ABracketedIpv6MasterIsSplitWithoutItsBrackets) {
  std::string message;
  auto config = Parse({"--master", "[::1]:7000"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->master_host(), "::1");
  EXPECT_EQ(config->master_port(), 7000);
  for (const char* bad : {"[::1:7000", "::1]:7000", "[]:7000"}) {
    EXPECT_FALSE(Parse({"--master", bad}, &message)) << bad;
    EXPECT_NE(message.find("--master must be HOST:PORT"), std::string::npos) << message;
  }
}

TEST(WorkerConfigTest, FlagsOverrideDefaults) {
  std::string message;
  auto config = Parse({"--node-id",
                       "n7",
                       "--host",
                       "0.0.0.0",
                       "--advertise-host",
                       "10.0.0.7",
                       "--port",
                       "0",
                       "--master",
                       "10.0.0.1:6000",
                       "--heartbeat-interval-ms",
                       "250",
                       "--promote-on-get",
                       "false",
                       "--allow-evict-soft-pinned",
                       "0",
                       "--kv-lease-ttl-ms",
                       "0",
                       "--inter-node-eviction",
                       "false",
                       "--hard-pin-write-through",
                       "false",
                       "--ready-file",
                       "/tmp/r",
                       "--log-level",
                       "debug",
                       "--test-crash-at",
                       "after_adopt"},
                      &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->node_id, "n7");
  EXPECT_EQ(config->host, "0.0.0.0");
  EXPECT_EQ(config->advertise_host, "10.0.0.7");
  EXPECT_EQ(config->port, 0);
  EXPECT_EQ(config->master_host(), "10.0.0.1");
  EXPECT_EQ(config->master_port(), 6000);
  EXPECT_EQ(config->heartbeat_interval_ms, 250);
  EXPECT_FALSE(config->promote_on_get);
  EXPECT_FALSE(config->allow_evict_soft_pinned);
  EXPECT_EQ(config->kv_lease_ttl_ms, 0);
  EXPECT_FALSE(config->inter_node_eviction);
  EXPECT_FALSE(config->hard_pin_write_through);
  EXPECT_EQ(config->ready_file, "/tmp/r");
  EXPECT_EQ(config->log_level, "debug");
  EXPECT_EQ(config->test_crash_at, "after_adopt");
}

TEST(WorkerConfigTest, RpcEngineIsThreadsUnlessEpollIsAsked) {
  std::string message;
  auto by_default = Parse({}, &message);
  ASSERT_TRUE(by_default) << message;
  EXPECT_EQ(by_default->rpc_limits.engine, RpcEngine::kThreads);
  auto epoll = Parse({"--rpc-engine", "epoll"}, &message);
  ASSERT_TRUE(epoll) << message;
  EXPECT_EQ(epoll->rpc_limits.engine, RpcEngine::kEpoll);
  auto upper = Parse({"--rpc-engine", "EPOLL"}, &message);
  ASSERT_TRUE(upper) << message;
  EXPECT_EQ(upper->rpc_limits.engine, RpcEngine::kEpoll);
  auto bogus = Parse({"--rpc-engine", "fibers"}, &message);
  ASSERT_FALSE(bogus);
  // The error names the flag and the choices, by name.
  EXPECT_NE(message.find("--rpc-engine"), std::string::npos) << message;
  EXPECT_NE(message.find("{threads,epoll}"), std::string::npos) << message;
  auto help = Parse({"--help"}, &message);
  ASSERT_TRUE(help && help->show_help) << message;
  EXPECT_NE(message.find("{threads,epoll}=threads"), std::string::npos) << message;
}

TEST(WorkerConfigTest, SizesAcceptBinaryAndDecimalSuffixes) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  for (const Case& c : {Case{"64MiB", 64 * kMiB}, Case{"1GiB", kGiB}, Case{"512MB", 512'000'000},
                        Case{"1GB", 1'000'000'000}, Case{"64M", 64 * kMiB},
                        Case{"64mib", 64 * kMiB}, Case{"4194304", 4 * kMiB}}) {
    std::string message;
    auto config = Parse({"--dram-capacity", c.text, "--ssd-capacity", c.text}, &message);
    ASSERT_TRUE(config) << c.text << ": " << message;
    EXPECT_EQ(config->dram_capacity, c.bytes) << c.text;
    EXPECT_EQ(config->ssd_capacity, c.bytes) << c.text;
  }
  // No SSD tier at all.
  std::string message;
  auto no_ssd = Parse({"--ssd-capacity", "0"}, &message);
  ASSERT_TRUE(no_ssd) << message;
  EXPECT_EQ(no_ssd->ssd_capacity, 0u);
}

// A bare number is bytes; "--dram-capacity 64" used to start a worker that
// reported ready and then failed every put with NO_AVAILABLE_HANDLE. A tier
// below 1 MiB is now rejected, with the unit the number most likely lacked.
TEST(WorkerConfigTest, TierCapacityBelowOneMiBIsRejectedWithAUnitHint) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* says;
  };
  for (const Case& c : {
           Case{{"--dram-capacity", "64"},
                "--dram-capacity 64 is 64 bytes; a tier must hold at least 1.0 MiB; did you "
                "mean 64MiB?"},
           Case{{"--ssd-capacity", "1"},
                "--ssd-capacity 1 is 1 bytes; a tier must hold at least 1.0 MiB (or be 0 for "
                "none); did you mean 1MiB?"},
           Case{{"--vram-capacity", "512"}, "--vram-capacity 512 is 512 bytes"},
           Case{{"--dram-capacity", "1048575"}, "--dram-capacity 1048575 is 1048575 bytes"},
           Case{{"--ssd-capacity", "512KiB"}, "--ssd-capacity 524288 is 524288 bytes"},
       }) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << *c.args.begin() << " " << *(c.args.begin() + 1);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
  // In a config file too.
  TempFile file("ssd-capacity = 1\n");
  std::string message;
  EXPECT_FALSE(Parse({"--config", file.path().c_str()}, &message));
  EXPECT_NE(message.find("did you mean 1MiB?"), std::string::npos) << message;
  // 1 MiB is enough, and 0 still means "no SSD / VRAM tier".
  auto edge =
      Parse({"--dram-capacity", "1048576", "--ssd-capacity", "1MiB", "--vram-capacity", "1MiB"},
            &message);
  ASSERT_TRUE(edge) << message;
  auto none = Parse({"--ssd-capacity", "0", "--vram-capacity", "0"}, &message);
  ASSERT_TRUE(none) << message;
}

// Registration carries a tier's capacity as an i64: a tier of 2^63 bytes
// or more passed here, arrived negative, and the worker served but never
// registered, logging "master unreachable". It is a usage error now.
TEST(WorkerConfigTest, TierCapacityTheMasterCannotBeToldIsRejectedNamingTheFlag) {
  for (const auto& [flag, value] :
       {std::pair{"--ssd-capacity", "9000000TiB"}, std::pair{"--dram-capacity", "10000000TB"},
        std::pair{"--vram-capacity", "9223372036854775808"}}) {
    std::string message;
    auto config = Parse({flag, value}, &message);
    ASSERT_FALSE(config) << flag << " " << value;
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(std::string(flag) + " "), std::string::npos) << message;
    EXPECT_NE(message.find("at most 9223372036854775807 bytes"), std::string::npos) << message;
  }
  // The largest value the wire carries is accepted.
  std::string message;
  auto edge = Parse({"--ssd-capacity", "9223372036854775807"}, &message);
  ASSERT_TRUE(edge) << message;
  EXPECT_EQ(edge->ssd_capacity, kMaxTierCapacity);
}

TEST(WorkerConfigTest, BadSizeTextIsRejectedNamingTheFlag) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* mentions;
  };
  for (const Case& c : {Case{{"--dram-capacity", "lots"}, "--dram-capacity"},
                        Case{{"--dram-capacity", "12XB"}, "--dram-capacity"},
                        Case{{"--dram-capacity", "-5"}, "--dram-capacity"},
                        Case{{"--ssd-capacity", "1.5.GiB"}, "--ssd-capacity"},
                        Case{{"--ssd-capacity", ""}, "--ssd-capacity"},
                        Case{{"--dram-capacity", "0"}, "--dram-capacity"}}) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << c.mentions << " " << *c.args.begin() << " " << *(c.args.begin() + 1);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
  }
}

TEST(WorkerConfigTest, WatermarksMustBeOrdered) {
  for (std::initializer_list<const char*> args :
       {std::initializer_list<const char*>{"--high-watermark", "0.5", "--low-watermark", "0.7"},
        std::initializer_list<const char*>{"--high-watermark", "0.8", "--low-watermark", "0.8"},
        std::initializer_list<const char*>{"--high-watermark", "1.5"},
        std::initializer_list<const char*>{"--low-watermark", "0"},
        std::initializer_list<const char*>{"--low-watermark", "-0.1"}}) {
    std::string message;
    auto config = Parse(args, &message);
    ASSERT_FALSE(config) << *args.begin() << " " << *(args.begin() + 1);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find("watermark"), std::string::npos) << message;
  }
  std::string message;
  auto edge = Parse({"--high-watermark", "1", "--low-watermark", "0.1"}, &message);
  ASSERT_TRUE(edge) << message;
  EXPECT_DOUBLE_EQ(edge->high_watermark, 1.0);
  EXPECT_DOUBLE_EQ(edge->low_watermark, 0.1);
}

TEST(WorkerConfigTest, RejectsOutOfRangeValues) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* mentions;
  };
  for (const Case& c :
       {Case{{"--port", "65536"}, "--port"},
        Case{{"--port", "70000"}, "--port"},
        Case{{"--port", "-1"}, "--port"},
        Case{{"--port", "abc"}, "--port"},
        Case{{"--master", "127.0.0.1"}, "--master"},
        Case{{"--master", "127.0.0.1:"}, "--master"},
        Case{{"--master", ":50051"}, "--master"},
        Case{{"--master", "host:0"}, "--master"},
        Case{{"--master", "host:70000"}, "--master"},
        Case{{"--master", "host:5x"}, "--master"},
        Case{{"--host", ""}, "--host"},
        Case{{"--heartbeat-interval-ms", "0"}, "--heartbeat-interval-ms"},
        Case{{"--kv-lease-ttl-ms", "-1"}, "--kv-lease-ttl-ms"},
        Case{{"--kv-lease-ttl-ms", "10000000000000"}, "--kv-lease-ttl-ms"},
        Case{{"--heartbeat-interval-ms", "10000000000000"}, "--heartbeat-interval-ms"},
        Case{{"--soft-pin-ttl-ms", "0"}, "--soft-pin-ttl-ms"},
        Case{{"--soft-pin-ttl-ms", "86400001"}, "--soft-pin-ttl-ms"},
        Case{{"--adopt-confirm-delay-ms", "0"}, "--adopt-confirm-delay-ms"},
        Case{{"--put-start-discard-timeout-ms", "0"}, "--put-start-discard-timeout-ms"},
        Case{{"--test-crash-at", "bogus"}, "--test-crash-at"},
        Case{{"--log-level", "loud"}, "--log-level"},
        Case{{"--promote-on-get", "maybe"}, "--promote-on-get"},
        Case{{"--admin-port", "-2"}, "--admin-port"},
        Case{{"--admin-port", "65536"}, "--admin-port"},
        Case{{"--port", "7000", "--admin-port", "7000"}, "--admin-port"},
        Case{{"--admin-host", ""}, "--admin-host"},
        Case{{"--admin-token", "has space"}, "--admin-token"},
        Case{{"--ssd-path", ""}, "--ssd-path"}}) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << c.mentions << " " << *(c.args.begin() + 1);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
  }
}

// A "never" value such as INT64_MAX used to be accepted and then overflow the
// write path's deadline (now + timeout) into the past, so every chunked put
// was discarded as soon as it started. Both delays are capped at 24 h, like
// the other TTLs, and the message names the flag and the limit.
TEST(WorkerConfigTest, DiscardTimeoutAndAdoptDelayAreCappedAt24Hours) {
  for (const char* flag : {"--put-start-discard-timeout-ms", "--adopt-confirm-delay-ms"}) {
    for (const char* value : {"86400001", "9223372036854775807"}) {
      std::string message;
      auto config = Parse({flag, value}, &message);
      ASSERT_FALSE(config) << flag << " " << value;
      EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
      EXPECT_NE(message.find(std::string(flag) + " must be in 1..86400000 (24 h), got " + value),
                std::string::npos)
          << message;
    }
    std::string message;
    auto edge = Parse({flag, "86400000"}, &message);
    ASSERT_TRUE(edge) << flag << ": " << message;
  }
}

TEST(WorkerConfigTest, EdgeValuesAreAccepted) {
  std::string message;
  auto config = Parse({"--soft-pin-ttl-ms", "86400000", "--port", "65535", "--admin-port", "-1",
                       "--master", "[::1]:1"},
                      &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->soft_pin_ttl_ms, 86'400'000);
  EXPECT_EQ(config->port, 65535);
  EXPECT_EQ(config->admin_port, -1);
  EXPECT_EQ(config->master_port(), 1);
  // Without an SSD tier the SSD path is not needed.
  auto no_ssd = Parse({"--ssd-capacity", "0", "--ssd-path", ""}, &message);
  ASSERT_TRUE(no_ssd) << message;
  for (const char* hook : {"after_adopt", "after_hand_over", "hand_over_answer_lost"}) {
    auto crash = Parse({"--test-crash-at", hook}, &message);
    ASSERT_TRUE(crash) << hook << ": " << message;
    EXPECT_EQ(crash->test_crash_at, hook);
  }
}

TEST(WorkerConfigTest, ConfigFileUsesFlagNamesAndFlagsWin) {
  TempFile file(
      "node-id = \"gpu-node-7\"\n"
      "port = 6000\n"
      "master = \"10.0.0.1:7000\"\n"
      "dram-capacity = \"64MiB\"\n"
      "ssd-capacity = \"512MB\"\n"
      "ssd-path = \"/tmp/ssd-from-file\"\n"
      "high-watermark = 0.95\n"
      "low-watermark = 0.5\n"
      "kv-lease-ttl-ms = 2000\n"
      "promote-on-get = false\n"
      "log-level = \"warn\"\n");
  std::string message;
  auto config = Parse(
      {"--config", file.path().c_str(), "--port", "6500", "--dram-capacity", "1GiB"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->node_id, "gpu-node-7");
  EXPECT_EQ(config->port, 6500);               // the command line beats the file
  EXPECT_EQ(config->dram_capacity, kGiB);      // for sizes too
  EXPECT_EQ(config->master, "10.0.0.1:7000");  // the rest comes from the file
  EXPECT_EQ(config->ssd_capacity, 512'000'000u);
  EXPECT_EQ(config->ssd_path, "/tmp/ssd-from-file");
  EXPECT_DOUBLE_EQ(config->high_watermark, 0.95);
  EXPECT_DOUBLE_EQ(config->low_watermark, 0.5);
  EXPECT_EQ(config->kv_lease_ttl_ms, 2000);
  EXPECT_FALSE(config->promote_on_get);
  EXPECT_EQ(config->log_level, "warn");
  // Untouched settings keep their defaults.
  EXPECT_EQ(config->heartbeat_interval_ms, 1000);
}

TEST(WorkerConfigTest, ConfigFileValuesAreValidated) {
  {
    TempFile file("port = 70000\n");
    std::string message;
    auto config = Parse({"--config", file.path().c_str()}, &message);
    ASSERT_FALSE(config);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find("--port"), std::string::npos) << message;
  }
  {
    TempFile file("dram-capacity = \"lots\"\n");
    std::string message;
    auto config = Parse({"--config", file.path().c_str()}, &message);
    ASSERT_FALSE(config);
    EXPECT_NE(message.find("dram-capacity"), std::string::npos) << message;
  }
  {
    TempFile file("high-watermark = 0.5\nlow-watermark = 0.6\n");
    std::string message;
    auto config = Parse({"--config", file.path().c_str()}, &message);
    ASSERT_FALSE(config);
    EXPECT_NE(message.find("watermark"), std::string::npos) << message;
  }
}

TEST(WorkerConfigTest, UnknownConfigFileKeyIsRejected) {
  struct Case {
    const char* text;
    const char* key;
  };
  for (const Case& c : {Case{"dram_capacity = \"1GiB\"\n", "dram_capacity"},  // not the flag name
                        Case{"dram-capacty = \"1GiB\"\n", "dram-capacty"},
                        Case{"port = 6000\nbogus = 1\n", "bogus"}}) {
    TempFile file(c.text);
    std::string message;
    auto config = Parse({"--config", file.path().c_str()}, &message);
    EXPECT_FALSE(config) << c.text;
    EXPECT_NE(message.find(c.key), std::string::npos) << message;
  }
}

TEST(WorkerConfigTest, MissingConfigFileIsRejected) {
  std::string message;
  EXPECT_FALSE(Parse({"--config", "/nonexistent/worker.toml"}, &message));
  EXPECT_FALSE(message.empty());
}

TEST(WorkerConfigTest, RejectsUnknownFlagsAndPositionals) {
  std::string message;
  EXPECT_FALSE(Parse({"--bogus", "1"}, &message));
  EXPECT_FALSE(message.empty());
  message.clear();
  EXPECT_FALSE(Parse({"stray"}, &message));
  EXPECT_FALSE(message.empty());
}

TEST(WorkerConfigTest, HelpListsFlagsWithDefaults) {
  std::string message;
  auto config = Parse({"--help"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_TRUE(config->show_help);
  for (const char* text :
       {"--dram-capacity", "--ssd-capacity", "--ssd-path", "--master", "127.0.0.1:50051", "--port",
        "50061", "--high-watermark", "--low-watermark", "--kv-lease-ttl-ms", "--soft-pin-ttl-ms",
        "--promote-on-get", "--config", "--admin-port", "50060", "--admin-token-file",
        "--ready-file", "--log-level"}) {
    EXPECT_NE(message.find(text), std::string::npos) << text << " missing from:\n" << message;
  }
  // The crash hook is for tests only.
  EXPECT_EQ(message.find("--test-crash-at"), std::string::npos) << message;
  // A size default can be passed back as printed (it read "256.0 MiB",
  // which the flag refuses).
  const std::string marker = "--dram-capacity SIZE";
  const size_t flag = message.find(marker);
  ASSERT_NE(flag, std::string::npos) << message;
  const size_t open = message.find("(default ", flag);
  ASSERT_NE(open, std::string::npos) << message;
  const size_t start = open + std::string("(default ").size();
  const std::string printed = message.substr(start, message.find(')', start) - start);
  std::string again;
  auto reparsed = Parse({"--dram-capacity", printed.c_str()}, &again);
  ASSERT_TRUE(reparsed) << printed << ": " << again;
  EXPECT_EQ(reparsed->dram_capacity, config->dram_capacity);
}

TEST(WorkerConfigTest, AdminFlagsParse) {
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

TEST(WorkerConfigTest, AdminTokenFileIsReadTrimmedAndTheFlagWins) {
  TempFile token("  tok-from-file\n\n", "token");
  std::string message;
  auto config = Parse({"--admin-token-file", token.path().c_str()}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_token, "tok-from-file");
  EXPECT_EQ(config->admin_token_file, token.path());

  config =
      Parse({"--admin-token-file", token.path().c_str(), "--admin-token", "from-flag"}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_token, "from-flag");

  // Named in the config file, too.
  TempFile file("admin-token-file = \"" + token.path() + "\"\n");
  config = Parse({"--config", file.path().c_str()}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->admin_token, "tok-from-file");
}

TEST(WorkerConfigTest, UnreadableOrEmptyTokenFileIsAConfigError) {
  std::string message;
  auto config = Parse({"--admin-token-file", "/nonexistent/token"}, &message);
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(message.find("--admin-token-file"), std::string::npos) << message;

  TempFile blank(" \n\t\n", "token");
  message.clear();
  config = Parse({"--admin-token-file", blank.path().c_str()}, &message);
  ASSERT_FALSE(config);
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
}

// The master rejects a token file whose token has a space inside (it could
// never be sent in an Authorization header); the worker must too.
TEST(WorkerConfigTest, TokenFileWithSpacesInsideIsRejected) {
  TempFile spaced("two words\n", "token");
  std::string message;
  auto config = Parse({"--admin-token-file", spaced.path().c_str()}, &message);
  EXPECT_FALSE(config) << "accepted token '" << (config ? config->admin_token : "") << "'";
  EXPECT_NE(message.find("--admin-token"), std::string::npos) << message;
}

TEST(WorkerConfigTest, ValidateAcceptsDefaultsAndNullMessage) {
  EXPECT_TRUE(ValidateWorkerConfig(WorkerConfig{}, nullptr));
  WorkerConfig bad;
  bad.low_watermark = 0.95;
  EXPECT_EQ(ValidateWorkerConfig(bad, nullptr).error(), ErrorCode::kInvalidParams);
  std::string message;
  EXPECT_FALSE(ValidateWorkerConfig(bad, &message));
  EXPECT_NE(message.find("watermark"), std::string::npos) << message;
  EXPECT_FALSE(Parse({"--port", "99999"}, nullptr));
  EXPECT_TRUE(Parse({"--help"}, nullptr));
}

TEST(WorkerConfigTest, RdmaDefaultsToAutoOnTheFirstDevice) {
  std::string message;
  auto config = Parse({}, &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->rdma, "auto");
  EXPECT_EQ(config->rdma_device, "");
  EXPECT_EQ(config->rdma_port, 1);
  EXPECT_EQ(config->rdma_gid_index, -1);
  auto help = Parse({"--help"}, &message);
  ASSERT_TRUE(help);
  for (const char* text : {"--rdma", "--rdma-device", "--rdma-port", "--rdma-gid-index"}) {
    EXPECT_NE(message.find(text), std::string::npos) << text << " missing from:\n" << message;
  }
}

TEST(WorkerConfigTest, RdmaFlagsParseFromTheCommandLineAndAFile) {
  std::string message;
  for (const char* mode : {"auto", "on", "off"}) {
    auto config = Parse({"--rdma", mode}, &message);
    ASSERT_TRUE(config) << mode << ": " << message;
    EXPECT_EQ(config->rdma, mode);
  }
  auto config = Parse(
      {"--rdma", "on", "--rdma-device", "mlx5_1", "--rdma-port", "2", "--rdma-gid-index", "3"},
      &message);
  ASSERT_TRUE(config) << message;
  EXPECT_EQ(config->rdma_device, "mlx5_1");
  EXPECT_EQ(config->rdma_port, 2);
  EXPECT_EQ(config->rdma_gid_index, 3);
  auto edge = Parse({"--rdma-port", "255", "--rdma-gid-index", "0"}, &message);
  ASSERT_TRUE(edge) << message;

  TempFile file(
      "rdma = \"off\"\n"
      "rdma-device = \"rxe0\"\n"
      "rdma-port = 4\n"
      "rdma-gid-index = 1\n");
  auto from_file = Parse({"--config", file.path().c_str(), "--rdma-port", "5"}, &message);
  ASSERT_TRUE(from_file) << message;
  EXPECT_EQ(from_file->rdma, "off");
  EXPECT_EQ(from_file->rdma_device, "rxe0");
  EXPECT_EQ(from_file->rdma_port, 5) << "flags win over the file";
  EXPECT_EQ(from_file->rdma_gid_index, 1);
}

TEST(WorkerConfigTest, RdmaValuesOutOfRangeAreRejectedNamingTheFlag) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* mentions;
  };
  for (const Case& c :
       {Case{{"--rdma", "yes"}, "--rdma"}, Case{{"--rdma", "ON"}, "--rdma"},
        Case{{"--rdma", ""}, "--rdma"}, Case{{"--rdma-port", "0"}, "--rdma-port"},
        Case{{"--rdma-port", "256"}, "--rdma-port"}, Case{{"--rdma-port", "x"}, "--rdma-port"},
        Case{{"--rdma-gid-index", "-2"}, "--rdma-gid-index"}}) {
    std::string message;
    auto config = Parse(c.args, &message);
    ASSERT_FALSE(config) << c.mentions << " " << *(c.args.begin() + 1);
    EXPECT_EQ(config.error(), ErrorCode::kInvalidParams);
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
  }
  WorkerConfig bad;
  bad.rdma = "sometimes";
  std::string message;
  EXPECT_FALSE(ValidateWorkerConfig(bad, &message));
  EXPECT_NE(message.find("--rdma"), std::string::npos) << message;
}

}  // namespace
}  // namespace mooncake
