// The spare-CPU probe behind RPC polling: the /proc/loadavg parser, the
// cgroup CPU-quota check over a made-up cgroup tree (v1, v2 and both at
// once), and the test override.

#include "common/spare_cpu.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace mooncake {
namespace {

namespace fs = std::filesystem;

TEST(SpareCpuTest, TheRunningCountIsTheFourthWordOfLoadavg) {
  EXPECT_EQ(ParseRunningThreads("0.62 1.48 1.52 1/80 31836\n"), 1);
  EXPECT_EQ(ParseRunningThreads("12.00 9.10 8.00 17/1203 4"), 17);
  EXPECT_EQ(ParseRunningThreads("0.00  0.00  0.00  0/5 1"), 0);  // extra spaces
  EXPECT_FALSE(ParseRunningThreads(""));
  EXPECT_FALSE(ParseRunningThreads("0.62 1.48 1.52"));
  EXPECT_FALSE(ParseRunningThreads("0.62 1.48 1.52 x/80 31836"));
  EXPECT_FALSE(ParseRunningThreads("0.62 1.48 1.52 3"));  // no "/total"
  EXPECT_FALSE(ParseRunningThreads("0.62 1.48 1.52 -3/80 1"));
}

TEST(SpareCpuTest, ThisMachinesLoadavgParses) {
  std::ifstream in("/proc/loadavg");
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "no /proc/loadavg";
  auto running = ParseRunningThreads(line);
  ASSERT_TRUE(running) << line;
  EXPECT_GE(*running, 1) << "the reader itself runs";
}

class CgroupQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("mc-cgroup-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void Put(const fs::path& relative, const std::string& content) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << content;
  }

  bool Quota(std::string_view self_cgroup) const {
    return CgroupCpuLimit(self_cgroup, root_).has_value();
  }

  fs::path root_;
};

TEST_F(CgroupQuotaTest, NoCgroupFilesMeansNoQuota) {
  EXPECT_FALSE(Quota("0::/\n"));
  EXPECT_FALSE(Quota("1:cpu:/\n0::/a/b\n"));
  EXPECT_FALSE(Quota(""));
  EXPECT_FALSE(Quota("garbage without colons\n"));
}

TEST_F(CgroupQuotaTest, CgroupV2CpuMaxOtherThanMaxIsAQuota) {
  Put("app/cpu.max", "max 100000\n");
  EXPECT_FALSE(Quota("0::/app\n"));
  Put("app/cpu.max", "200000 100000\n");
  EXPECT_TRUE(Quota("0::/app\n"));
}

TEST_F(CgroupQuotaTest, AQuotaAboveTheProcesssCgroupCounts) {
  Put("slice/cpu.max", "50000 100000\n");
  Put("slice/app/cpu.max", "max 100000\n");
  EXPECT_TRUE(Quota("0::/slice/app\n"));
  // A sibling's quota does not.
  Put("other/cpu.max", "max 100000\n");
  Put("elsewhere/cpu.max", "50000 100000\n");
  EXPECT_FALSE(Quota("0::/other\n"));
}

TEST_F(CgroupQuotaTest, ACgroupNamespaceRootIsChecked) {
  // Inside a container with its own cgroup namespace the path is "/" and
  // the mount is the container's cgroup.
  Put("cpu.max", "100000 100000\n");
  EXPECT_TRUE(Quota("0::/\n"));
}

TEST_F(CgroupQuotaTest, CgroupV2BesideV1IsUnderUnified) {
  Put("unified/app/cpu.max", "100000 100000\n");
  EXPECT_TRUE(Quota("1:cpu:/\n0::/app\n"));
}

TEST_F(CgroupQuotaTest, CgroupV1CfsQuotaAboveZeroIsAQuota) {
  Put("cpu,cpuacct/app/cpu.cfs_quota_us", "-1\n");
  EXPECT_FALSE(Quota("4:cpu,cpuacct:/app\n"));
  Put("cpu,cpuacct/app/cpu.cfs_quota_us", "150000\n");
  EXPECT_TRUE(Quota("4:cpu,cpuacct:/app\n"));
  // Another controller's line is not the CPU's.
  EXPECT_FALSE(Quota("4:cpuacct:/app\n"));
}

TEST_F(CgroupQuotaTest, CgroupV1CpuLinkAndAncestorsAreChecked) {
  Put("cpu/cpu.cfs_quota_us", "100000\n");
  EXPECT_TRUE(Quota("3:cpu,cpuacct:/docker/abc\n"));
}

// What the client sizes its shared calls by: the tightest quota on the path,
// in CPUs.
TEST_F(CgroupQuotaTest, TheLimitIsTheTightestQuotaOverItsPeriod) {
  EXPECT_EQ(CgroupCpuLimit("0::/app\n", root_), std::nullopt);
  Put("slice/cpu.max", "800000 100000\n");
  Put("slice/app/cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuLimit("0::/slice/app\n", root_), 1.5);
  Put("slice/app/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuLimit("0::/slice/app\n", root_), 8.0);
  // v1: quota over cpu.cfs_period_us (100 ms when that is missing).
  Put("cpu,cpuacct/job/cpu.cfs_quota_us", "400000\n");
  EXPECT_EQ(CgroupCpuLimit("4:cpu,cpuacct:/job\n", root_), 4.0);
  Put("cpu,cpuacct/job/cpu.cfs_period_us", "200000\n");
  EXPECT_EQ(CgroupCpuLimit("4:cpu,cpuacct:/job\n", root_), 2.0);
  // A quota that does not parse still is one: taken as one CPU.
  Put("odd/cpu.max", "lots 100000\n");
  EXPECT_EQ(CgroupCpuLimit("0::/odd\n", root_), 1.0);
}

TEST(SpareCpuTest, TheOverrideForcesTheAnswer) {
  ForceSpareCpuForTesting(true);
  EXPECT_TRUE(SpareCpuNow());
  ForceSpareCpuForTesting(false);
  EXPECT_FALSE(SpareCpuNow());
  ForceSpareCpuForTesting(std::nullopt);
}

}  // namespace
}  // namespace mooncake
