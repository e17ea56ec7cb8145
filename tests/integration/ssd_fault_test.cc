// SSD faults end to end (docs/design.md, "Tiers"): a real mooncake-worker whose
// RocksDB directory sits on a small tmpfs that fills up, and one started on a
// damaged RocksDB directory. What a user relies on:
//  * a put that needs the full SSD fails with NO_AVAILABLE_HANDLE, leaves the
//    key absent, and everything already stored stays readable byte-exact;
//    the worker stays up and takes puts again once space is freed;
//  * a corrupt database stops the worker at start with exit code 4 and one
//    line naming the path and RocksDB's status; damaged value bytes found
//    only at read time fail the read instead of being served.
// The full-disk test mounts a tmpfs and so needs root; it skips otherwise.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/disk_faults.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;
constexpr char kNode[] = "w1";

std::string ReadWholeFile(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class SsdFaultTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Nothing may hold files on the tmpfs when it is unmounted, and it must
    // be gone before the harness removes its temp dir.
    cluster_.KillWorker(kNode, SIGKILL);
    tmpfs_.reset();
  }

  fs::path NodeDir() const { return cluster_.dir() / kNode; }
  // Where the harness points --ssd-path.
  fs::path SsdPath() const { return NodeDir() / "ssd"; }

  // Mounts a tmpfs of `bytes` on the worker's directory (its SSD path's
  // parent); returns the reason if it cannot.
  std::string MountTmpfs(uint64_t bytes) {
    tmpfs_.emplace(NodeDir(), bytes);
    return tmpfs_->mounted() ? "" : tmpfs_->error();
  }

  std::string WorkerLog() const {
    return ReadWholeFile(cluster_.dir() / (std::string(kNode) + ".log"));
  }

  // Puts `value` into the SSD tier of w1.
  Result<void> PutOnSsd(Client& client, const std::string& key, const std::string& value) {
    return client.Put(key, value, {.preferred_node = kNode, .preferred_tier = "ssd"});
  }

  // A worker whose SSD holds `large` (blob files) and `small` (inline in a
  // table file), restarted once so its WAL was flushed into .sst/.blob
  // files, then stopped cleanly.
  void GivenStoppedWorkerWithSsdObjects() {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker(
        kNode, {.dram = 16 * kMiB, .ssd = 64 * kMiB, .promote_on_get = false}));
    auto client = cluster_.NewClient(kNode);
    ASSERT_TRUE(client);
    ASSERT_TRUE(IsOk(PutOnSsd(*client, "large", large_)));
    ASSERT_TRUE(IsOk(PutOnSsd(*client, "small", small_)));
    ASSERT_TRUE(cluster_.RestartWorker(kNode));
    cluster_.KillWorker(kNode, SIGTERM);
    ASSERT_FALSE(FilesEndingWith(SsdPath(), ".sst").empty());
    ASSERT_FALSE(FilesEndingWith(SsdPath(), ".blob").empty());
  }

  // Expects the worker to refuse to start: exit code 4 and one clear line.
  void ExpectRestartRefused(std::string_view status) {
    auto started = cluster_.RestartWorker(kNode);
    ASSERT_FALSE(started) << "a worker started on a damaged SSD directory";
    EXPECT_NE(std::string(started.message()).find("exited with code 4"), std::string::npos)
        << started.message();
    const std::string log = WorkerLog();
    const std::string line = "ssd tier cannot be opened: path=" + SsdPath().string() + " status=";
    EXPECT_NE(log.find(line), std::string::npos) << log;
    EXPECT_NE(log.find(status), std::string::npos) << log;
    EXPECT_FALSE(cluster_.IsRunning(kNode));
  }

  TestCluster cluster_;
  std::optional<TmpfsMount> tmpfs_;
  const std::string large_ = PatternBytes(1, 2 * kMiB + 123);
  const std::string small_ = PatternBytes(2, 3000);
};

TEST_F(SsdFaultTest, FullSsdFailsPutsWithNoSpaceKeepsServingAndRecoversWhenSpaceIsFreed) {
  ASSERT_TRUE(cluster_.StartMaster());
  if (std::string why = MountTmpfs(8 * kMiB); !why.empty()) {
    GTEST_SKIP() << "needs root to mount a tmpfs: " << why;
  }
  // Space someone else holds on the same file system; freed later.
  const fs::path filler = NodeDir() / "filler";
  ASSERT_NO_FATAL_FAILURE(WriteFile(filler, std::string(3 * kMiB, 'f')));
  // Far more logical SSD capacity than the disk has: the disk fills first.
  ASSERT_TRUE(
      cluster_.StartWorker(kNode, {.dram = 16 * kMiB, .ssd = 256 * kMiB, .promote_on_get = false}));
  auto client = cluster_.NewClient(kNode);
  ASSERT_TRUE(client);

  const std::string in_dram = PatternBytes(10, 512 * 1024);
  ASSERT_TRUE(
      IsOk(client->Put("in-dram", in_dram, {.preferred_node = kNode, .preferred_tier = "dram"})));

  // When SSD puts go on until the disk is full
  std::vector<std::pair<std::string, std::string>> stored;
  std::string refused_key;
  for (int i = 0; i < 16 && refused_key.empty(); ++i) {
    std::string key = "ssd-" + std::to_string(i);
    std::string value = PatternBytes(100 + i, kMiB);
    auto put = PutOnSsd(*client, key, value);
    if (put) {
      stored.emplace_back(std::move(key), std::move(value));
      continue;
    }
    // Expect a code the client can act on: no space.
    EXPECT_TRUE(FailsWith(put, ErrorCode::kNoAvailableHandle));
    refused_key = key;
  }
  ASSERT_FALSE(refused_key.empty()) << "an 8 MiB tmpfs took 16 MiB";
  ASSERT_FALSE(stored.empty()) << "not even one put fitted\n" << cluster_.AllLogTails();

  // A multi-RPC put (two-phase write) is refused too.
  {
    PatternStreamBuf source(20, 6 * kMiB);
    std::istream in(&source);
    auto put =
        client->PutStream("big", in, 6 * kMiB, {.preferred_node = kNode, .preferred_tier = "ssd"});
    EXPECT_TRUE(FailsWith(put, ErrorCode::kNoAvailableHandle));
  }

  // Then the refused keys are absent, never half-written
  for (const std::string& key : {refused_key, std::string("big")}) {
    EXPECT_TRUE(FailsWith(client->Get(key), ErrorCode::kObjectNotFound)) << key;
    auto exists = client->Exist(key);
    ASSERT_TRUE(IsOk(exists));
    EXPECT_FALSE(*exists) << key;
  }
  // and everything already stored is served byte-exact by a live worker
  EXPECT_TRUE(cluster_.IsRunning(kNode));
  EXPECT_TRUE(ReadsBack(*client, "in-dram", in_dram));
  for (const auto& [key, value] : stored) {
    EXPECT_TRUE(ReadsBack(*client, key, value)) << key;
    EXPECT_EQ(client->Inspect(key).value_or(ObjectInspection{}).tier, "ssd") << key;
  }
  const std::string log = WorkerLog();
  EXPECT_NE(log.find("ssd write failed"), std::string::npos) << log;
  EXPECT_NE(log.find("reason=\"No space left on device\""), std::string::npos) << log;

  // When space is freed on the disk, the refused put works
  fs::remove(filler);
  const std::string later = PatternBytes(300, kMiB);
  Result<void> put = Err(ErrorCode::kInternalError);
  ASSERT_TRUE(Eventually([&] { return (put = PutOnSsd(*client, refused_key, later)).has_value(); },
                         20s, 200ms))
      << "put still fails after freeing space: " << ToString(put.error());
  EXPECT_TRUE(ReadsBack(*client, refused_key, later));
  stored.emplace_back(refused_key, later);

  // and after a restart exactly the committed SSD objects come back intact.
  ASSERT_TRUE(cluster_.RestartWorker(kNode));
  client = cluster_.NewClient(kNode);  // the worker listens on a new port
  ASSERT_TRUE(client);
  for (const auto& [key, value] : stored) EXPECT_TRUE(ReadsBack(*client, key, value)) << key;
  EXPECT_TRUE(FailsWith(client->Get("big"), ErrorCode::kObjectNotFound));
}

TEST_F(SsdFaultTest, GarbageCurrentFileStopsTheWorkerWithExitCode4) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  ASSERT_NO_FATAL_FAILURE(WriteFile(SsdPath() / "CURRENT", "\x01not a manifest name"));
  ExpectRestartRefused("Corruption");
}

TEST_F(SsdFaultTest, OverwrittenManifestStopsTheWorkerWithExitCode4) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  auto manifests = FilesStartingWith(SsdPath(), "MANIFEST-");
  ASSERT_FALSE(manifests.empty());
  for (const auto& m : manifests) ASSERT_NO_FATAL_FAILURE(WriteFile(m, std::string(4096, 'Z')));
  ExpectRestartRefused("Corruption");
}

TEST_F(SsdFaultTest, DeletedTableFileStopsTheWorkerWithExitCode4) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  for (const auto& table : FilesEndingWith(SsdPath(), ".sst")) fs::remove(table);
  ExpectRestartRefused("No such file");
}

TEST_F(SsdFaultTest, TruncatedTableFileStopsTheWorkerWithExitCode4) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  for (const auto& table : FilesEndingWith(SsdPath(), ".sst")) fs::resize_file(table, 100);
  ExpectRestartRefused("Corruption");
}

TEST_F(SsdFaultTest, DeletedCurrentFileStopsTheWorkerInsteadOfStartingOver) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  fs::remove(SsdPath() / "CURRENT");
  ExpectRestartRefused("CURRENT is missing");
}

TEST_F(SsdFaultTest, DamagedValueBytesFailTheReadInsteadOfServingThem) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  for (const auto& blob : FilesEndingWith(SsdPath(), ".blob")) {
    const uint64_t size = fs::file_size(blob);
    ASSERT_GT(size, 64u * 1024);
    ASSERT_NO_FATAL_FAILURE(FlipBytes(blob, size / 2, 64));
  }
  // Damage inside value bytes is not visible at open: the worker starts.
  ASSERT_TRUE(cluster_.RestartWorker(kNode));
  auto client = cluster_.NewClient(kNode);
  ASSERT_TRUE(client);
  auto got = client->Get("large");
  EXPECT_FALSE(got.has_value()) << "served " << got->data.size()
                                << " bytes of a damaged object; equal to the original: "
                                << (got->data == large_);
  EXPECT_NE(WorkerLog().find("reason=\"corrupt data\""), std::string::npos) << WorkerLog();
  // The undamaged object is still served exactly, by a worker that is up.
  EXPECT_TRUE(ReadsBack(*client, "small", small_));
  EXPECT_TRUE(cluster_.IsRunning(kNode));
}

TEST_F(SsdFaultTest, DeletedSsdDirectoryStartsAsAFreshEmptyNode) {
  ASSERT_NO_FATAL_FAILURE(GivenStoppedWorkerWithSsdObjects());
  fs::remove_all(SsdPath());
  ASSERT_TRUE(cluster_.RestartWorker(kNode));
  auto client = cluster_.NewClient(kNode);
  ASSERT_TRUE(client);
  EXPECT_TRUE(FailsWith(client->Get("large"), ErrorCode::kObjectNotFound));
  EXPECT_TRUE(FailsWith(client->Get("small"), ErrorCode::kObjectNotFound));
  ASSERT_TRUE(IsOk(PutOnSsd(*client, "large", small_)));
  EXPECT_TRUE(ReadsBack(*client, "large", small_));
}

}  // namespace
}  // namespace mooncake::testing
