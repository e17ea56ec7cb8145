// mooncake-bench's flags: defaults, size texts, usage errors, and the
// configs derived from the options.

#include "bench/bench_options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace mooncake::bench {
namespace {

// Parses `args` (without the program name) with MOONCAKE_MASTER unset,
// restoring it afterwards.
class BenchOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* env = std::getenv("MOONCAKE_MASTER")) saved_master_ = env;
    unsetenv("MOONCAKE_MASTER");
  }
  void TearDown() override {
    if (saved_master_) {
      setenv("MOONCAKE_MASTER", saved_master_->c_str(), 1);
    } else {
      unsetenv("MOONCAKE_MASTER");
    }
  }

  std::optional<int> Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "mooncake-bench");
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    return ParseBenchFlags(static_cast<int>(argv.size()), argv.data(), options_);
  }

  BenchOptions options_;
  std::optional<std::string> saved_master_;
};

TEST_F(BenchOptionsTest, DefaultsNeedNoFlags) {
  EXPECT_EQ(Parse({}), std::nullopt);
  EXPECT_EQ(options_.master, "127.0.0.1:50051");
  EXPECT_EQ(options_.workload, "mixed");
  EXPECT_EQ(options_.value_size, 4096u);
  EXPECT_EQ(options_.hot_cache_bytes, 0u);
  EXPECT_FALSE(options_.duration_given);
  EXPECT_EQ(options_.transfer.sizes, TransferBenchOptions{}.sizes);
}

TEST_F(BenchOptionsTest, BatchDefaultsToSingleCalls) {
  EXPECT_EQ(Parse({}), std::nullopt);
  EXPECT_EQ(options_.batch, 1u);
  EXPECT_EQ(Parse({"--batch", "64"}), std::nullopt);
  EXPECT_EQ(options_.batch, 64u);
}

TEST_F(BenchOptionsTest, BatchOutOfRangeIsAUsageError) {
  EXPECT_EQ(Parse({"--batch", "0"}), 2);
  EXPECT_EQ(Parse({"--batch", "-3"}), 2);
  EXPECT_EQ(Parse({"--batch", "many"}), 2);
  EXPECT_EQ(Parse({"--batch", "65537"}), 2);
}

TEST_F(BenchOptionsTest, MasterWorkloadFlags) {
  EXPECT_EQ(Parse({"--workload", "master", "--keys", "5000", "--master-admin", "127.0.0.1:9100",
                   "--location-batch", "128", "--master-nodes", "3"}),
            std::nullopt);
  EXPECT_EQ(options_.workload, "master");
  EXPECT_FALSE(IsDeviceWorkload(options_));
  EXPECT_EQ(options_.keys, 5000u);
  EXPECT_EQ(options_.master_admin, "127.0.0.1:9100");
  EXPECT_EQ(options_.location_batch, 128u);
  EXPECT_EQ(options_.master_nodes, 3);
  EXPECT_EQ(Parse({"--workload", "master", "--location-batch", "0"}), 2);
  EXPECT_EQ(Parse({"--workload", "master", "--master-nodes", "0"}), 2);
}

TEST_F(BenchOptionsTest, SizeFlagsTakeUnits) {
  EXPECT_EQ(Parse({"--value-size", "1MiB", "--hot-cache-bytes", "64MiB", "--sizes", "4KiB,1MB"}),
            std::nullopt);
  EXPECT_EQ(options_.value_size, 1u << 20);
  EXPECT_EQ(options_.hot_cache_bytes, 64u << 20);
  EXPECT_EQ(options_.transfer.sizes, (std::vector<uint64_t>{4096, 1u << 20}));
}

TEST_F(BenchOptionsTest, MalformedSizesAreUsageErrors) {
  EXPECT_EQ(Parse({"--value-size", "4XB"}), 2);
  EXPECT_EQ(Parse({"--hot-cache-bytes", "lots"}), 2);
  EXPECT_EQ(Parse({"--sizes", "1KiB,zz"}), 2);
}

TEST_F(BenchOptionsTest, OutOfRangeAndUnknownFlagsAreUsageErrors) {
  EXPECT_EQ(Parse({"--workload", "random"}), 2);
  EXPECT_EQ(Parse({"--keys", "0"}), 2);
  EXPECT_EQ(Parse({"--get-ratio", "1.5"}), 2);
  EXPECT_EQ(Parse({"--no-such-flag"}), 2);
}

// A config file in the temp dir holding `text`, removed at the end.
class BenchConfigFile {
 public:
  explicit BenchConfigFile(const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              ("bench_options_test_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".toml")) {
    std::ofstream(path_) << text;
  }
  ~BenchConfigFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// CLI11 2.1 cut a value at its first '#', quoted or not.
TEST_F(BenchOptionsTest, AHashInsideQuotesInTheConfigFileIsPartOfTheValue) {
  BenchConfigFile file("node = \"gpu#7\"  # the put target\nkeys = 10 # a comment\n");
  EXPECT_EQ(Parse({"--config", file.path()}), std::nullopt);
  EXPECT_EQ(options_.node, "gpu#7");
  EXPECT_EQ(options_.keys, 10u);
  BenchConfigFile open_string("node = \"gpu#7\n");
  EXPECT_EQ(Parse({"--config", open_string.path()}), 2);
}

// A value is built in memory before the run: over 4 GiB is a usage error,
// not std::bad_alloc and an abort (exit 134); a config file over 1 MiB too.
TEST_F(BenchOptionsTest, ValueSizesAndConfigFilesOverTheirLimitsAreUsageErrors) {
  EXPECT_EQ(Parse({"--value-size", "1TiB"}), 2);
  EXPECT_EQ(Parse({"--value-size", "5GiB"}), 2);
  EXPECT_EQ(Parse({"--value-size", "4GiB"}), std::nullopt);
  EXPECT_EQ(options_.value_size, kMaxBenchValueBytes);
  BenchConfigFile big(std::string(2 << 20, '#') + "\n");
  EXPECT_EQ(Parse({"--config", big.path()}), 2);
  EXPECT_EQ(Parse({"--workload", "transfer", "--sizes", "64KiB,8GiB"}), 2);
}

TEST_F(BenchOptionsTest, ExplicitDurationIsRemembered) {
  EXPECT_EQ(Parse({"--duration-s", "10", "--ops", "500"}), std::nullopt);
  EXPECT_TRUE(options_.duration_given);
  EXPECT_EQ(options_.ops, 500u);
}

TEST_F(BenchOptionsTest, SharedFlagsReachTheTransferMode) {
  EXPECT_EQ(Parse({"--workload", "transfer", "--iterations", "7", "--json"}), std::nullopt);
  EXPECT_TRUE(IsDeviceWorkload(options_));
  EXPECT_EQ(options_.transfer.iterations, 7);
  EXPECT_TRUE(options_.transfer.json);
}

TEST_F(BenchOptionsTest, MasterFlagBeatsTheEnvironment) {
  setenv("MOONCAKE_MASTER", "10.0.0.1:7000", 1);
  EXPECT_EQ(Parse({}), std::nullopt);
  EXPECT_EQ(options_.master, "10.0.0.1:7000");
  EXPECT_EQ(Parse({"--master", "10.0.0.2:8000"}), std::nullopt);
  EXPECT_EQ(options_.master, "10.0.0.2:8000");
}

TEST_F(BenchOptionsTest, ClientConfigCarriesTheClientFlags) {
  ASSERT_EQ(Parse({"--master", "example.org:6000", "--node", "worker-1", "--hot-cache-bytes",
                   "1MiB", "--location-cache-bytes", "0", "--rdma", "auto"}),
            std::nullopt);
  std::optional<ClientConfig> config = ToClientConfig(options_);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->master_host, "example.org");
  EXPECT_EQ(config->master_port, 6000);
  EXPECT_EQ(config->local_node, "worker-1");
  EXPECT_EQ(config->local_hot_cache_bytes, 1u << 20);
  EXPECT_EQ(config->location_cache_bytes, 0u);
  EXPECT_EQ(config->rdma, "auto");
}

TEST_F(BenchOptionsTest, MasterWithoutHostOrPortIsRejected) {
  options_.master = "nocolon";
  EXPECT_EQ(ToClientConfig(options_), std::nullopt);
  options_.master = ":6000";
  EXPECT_EQ(ToClientConfig(options_), std::nullopt);
}

TEST_F(BenchOptionsTest, VramSizesStayDefaultUnlessGiven) {
  ASSERT_EQ(Parse({"--workload", "vram", "--gpu-device", "1"}), std::nullopt);
  VramBenchOptions vram = ToVramOptions(options_);
  EXPECT_EQ(vram.sizes, VramBenchOptions{}.sizes);
  EXPECT_EQ(vram.device_index, 1);
  ASSERT_EQ(Parse({"--workload", "vram", "--sizes", "8KiB"}), std::nullopt);
  EXPECT_EQ(ToVramOptions(options_).sizes, std::vector<uint64_t>{8192});
}

}  // namespace
}  // namespace mooncake::bench
