// /metrics answers operator questions (issue 15, item 6): gets, hits and
// misses are counted per object read, not per chunk; tier byte counters rise
// by what was read and written; process_* and mooncake_build_info are on both
// processes; every worker series carries node="<id>".

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 * kMiB, .ssd = 128 * kMiB}));
    master_admin_ = cluster_.master_admin_port();
    w1_admin_ = cluster_.worker_admin_port("w1");
    ASSERT_GT(master_admin_, 0);
    ASSERT_GT(w1_admin_, 0);
    client_ = cluster_.NewClient();
    ASSERT_TRUE(client_);
  }

  // A worker series; 0 when absent (a counter not yet written).
  double W1(const std::string& series) {
    double v = AdminMetric(w1_admin_, series);
    return std::isnan(v) ? 0 : v;
  }

  TestCluster cluster_;
  int master_admin_ = 0;
  int w1_admin_ = 0;
  std::unique_ptr<Client> client_;
};

const std::string kDramHits = "mooncake_worker_hits_total{tier=\"dram\",kind=\"dram\"}";
const std::string kDramRead = "mooncake_worker_tier_read_bytes_total{tier=\"dram\",kind=\"dram\"}";
const std::string kDramWritten =
    "mooncake_worker_tier_written_bytes_total{tier=\"dram\",kind=\"dram\"}";

TEST_F(MetricsTest, ABigGetCountsOneGetOneHitAndItsBytes) {
  const uint64_t size = 19 * kMiB;
  const std::string value = PatternBytes(7, size);
  const double written_before = W1(kDramWritten);
  ASSERT_TRUE(IsOk(client_->Put("big", value, {.preferred_node = "w1"})));
  EXPECT_EQ(W1(kDramWritten) - written_before, static_cast<double>(size));

  const double gets = W1("mooncake_worker_gets_total");
  const double hits = W1(kDramHits);
  const double read = W1(kDramRead);
  auto got = client_->Get("big");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->data.size(), size);
  EXPECT_EQ(W1("mooncake_worker_gets_total") - gets, 1) << "one get, not one per 4 MiB chunk";
  EXPECT_EQ(W1(kDramHits) - hits, 1);
  EXPECT_EQ(W1(kDramRead) - read, static_cast<double>(size));
  EXPECT_EQ(W1("mooncake_worker_get_misses_total"), 0);
}

TEST_F(MetricsTest, AGetOfAnAbsentKeyCountsOneMiss) {
  const double before = AdminMetric(master_admin_, "mooncake_master_get_misses_total");
  ASSERT_FALSE(std::isnan(before));
  auto got = client_->Get("never-stored");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(AdminMetric(master_admin_, "mooncake_master_get_misses_total") - before, 1);
}

// A batch remove tells the master of all its keys in one call, not one
// call per key, and still answers each key.
TEST_F(MetricsTest, ABatchRemoveReleasesItsKeysAtTheMasterInOneCall) {
  const std::string batch_calls =
      "mooncake_master_requests_total{op=\"batch_remove_owner\",code=\"OK\"}";
  const std::string single_calls =
      "mooncake_master_requests_total{op=\"remove_owner\",code=\"OK\"}";
  auto master = [&](const std::string& series) {
    double v = AdminMetric(master_admin_, series);
    return std::isnan(v) ? 0 : v;
  };
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("batch-remove-" + std::to_string(i));
    ASSERT_TRUE(IsOk(client_->Put(keys.back(), PatternBytes(i, 100), {.preferred_node = "w1"})));
  }
  keys.insert(keys.begin() + 7, "batch-remove-never-stored");
  const double batches = master(batch_calls);
  const double singles = master(single_calls);
  auto removed = client_->BatchRemove(keys, /*force=*/false);
  ASSERT_EQ(removed.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 7) {
      EXPECT_TRUE(FailsWith(removed[i], ErrorCode::kObjectNotFound));
    } else {
      EXPECT_TRUE(IsOk(removed[i])) << keys[i];
      EXPECT_TRUE(FailsWith(client_->Get(keys[i]), ErrorCode::kObjectNotFound)) << keys[i];
    }
  }
  EXPECT_EQ(master(batch_calls) - batches, 1);
  EXPECT_EQ(master(single_calls) - singles, 0);
  EXPECT_EQ(AdminMetric(master_admin_, "mooncake_master_keys"), 0);
}

TEST_F(MetricsTest, ProcessMetricsAndBuildInfoOnBothProcesses) {
  for (int port : {master_admin_, w1_admin_}) {
    auto reply = Http(port, "GET", "/metrics");
    ASSERT_TRUE(reply && reply->status == 200);
    for (const char* name : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                             "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                             "process_start_time_seconds"}) {
      double v = MetricIn(reply->body, name);
      EXPECT_FALSE(std::isnan(v)) << name << " on port " << port << "\n" << reply->body;
      if (std::string(name) != "process_cpu_seconds_total") {
        EXPECT_GT(v, 0) << name;
      }
    }
    EXPECT_NE(reply->body.find("# TYPE mooncake_build_info gauge\n"), std::string::npos);
    EXPECT_NE(reply->body.find("mooncake_build_info{"), std::string::npos) << reply->body;
    EXPECT_NE(reply->body.find("version=\""), std::string::npos);
  }
}

TEST_F(MetricsTest, EveryWorkerSeriesCarriesItsNode) {
  ASSERT_TRUE(IsOk(client_->Put("k", "v", {.preferred_node = "w1"})));
  auto reply = Http(w1_admin_, "GET", "/metrics");
  ASSERT_TRUE(reply && reply->status == 200);
  size_t samples = 0;
  for (size_t pos = 0; pos < reply->body.size();) {
    size_t eol = reply->body.find('\n', pos);
    if (eol == std::string::npos) eol = reply->body.size();
    std::string line = reply->body.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_NE(line.find("{node=\"w1\""), std::string::npos) << line;
  }
  EXPECT_GT(samples, 50u);
  // The master's per-node series use the same label value.
  EXPECT_EQ(AdminMetric(master_admin_, "mooncake_master_node_up{node=\"w1\"}"), 1);
}

// promtool (Debian package `prometheus`) accepts both pages; skipped where
// it is not installed.
TEST_F(MetricsTest, PromtoolAcceptsBothPages) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (apt-get install prometheus)";
  }
  ASSERT_TRUE(IsOk(client_->Put("k", "v", {.preferred_node = "w1"})));
  ASSERT_TRUE(client_->Get("k"));
  for (int port : {master_admin_, w1_admin_}) {
    auto reply = Http(port, "GET", "/metrics");
    ASSERT_TRUE(reply && reply->status == 200);
    auto file = cluster_.dir() / ("metrics-" + std::to_string(port) + ".txt");
    std::ofstream(file) << reply->body;
    std::string cmd = "promtool check metrics < " + file.string() + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
    int status = pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "\n" << reply->body;
  }
}

}  // namespace
}  // namespace mooncake::testing
