// A worker with a VRAM tier (--vram-capacity), as real mooncake-master and
// mooncake-worker processes on 127.0.0.1. This test process is the producer
// and reader on the worker's node: a second process relative to the worker,
// as CUDA requires for opening the worker's IPC handle.
//
// GpuWorkerTest.* runs everywhere: without a device the worker must start,
// say why VRAM is off, and serve from DRAM + SSD; with one, VRAM must be on.
// GpuWorkerDeviceTest.* needs a HIP device and skips, printing
// GpuTier::ProbeReason(), without one; MOONCAKE_REQUIRE_GPU=1 turns those
// skips into failures. MOONCAKE_GPU_DEVICE picks the device (default 0).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/shared_mapping.h"
#include "common/machine_id.h"
#include "tests/device_env.h"
#include "tests/integration/test_cluster.h"
#include "tests/test_bytes.h"
#include "tiers/gpu_tier.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;

// Writes `value` into a plan's space the way a producer on the node does.
::testing::AssertionResult Produce(const WritePlan& plan, const std::string& value) {
  std::string why;
  auto mapping = SharedMapping::Map(plan.memory, plan.offset, value.size(), &why);
  if (!mapping) {
    return ::testing::AssertionFailure()
           << "SharedMapping::Map failed with " << ToString(mapping.error()) << ": " << why;
  }
  auto copied = (*mapping)->CopyIn(0, Bytes(value));
  if (!copied) {
    return ::testing::AssertionFailure() << "CopyIn failed with " << ToString(copied.error());
  }
  return ::testing::AssertionSuccess();
}

// The bytes a placement names, read through a mapping of its region.
Result<std::string> ReadPlacement(const ObjectPlacement& placement, std::string* why) {
  auto mapping = SharedMapping::Map(placement.memory, placement.offset, placement.size, why);
  if (!mapping) return Err(mapping.error());
  std::string out(placement.size, '\0');
  auto copied = (*mapping)->CopyOut(0, std::as_writable_bytes(std::span(out.data(), out.size())));
  if (!copied) return Err(copied.error());
  return out;
}

bool NotReadable(const Result<ObjectValue>& got) {
  return !got && (got.error() == ErrorCode::kObjectNotFound ||
                  got.error() == ErrorCode::kReplicaIsNotReady);
}

std::vector<std::string> TierKinds(const WorkerCounters& stats) {
  std::vector<std::string> kinds;
  for (const auto& tier : stats.tiers) kinds.push_back(tier.usage.kind);
  return kinds;
}

// ---------------------------------------------------------------------------
// Runs everywhere.

TEST(GpuWorkerTest, AVramCapacityOnAMachineWithoutAGpuFallsBackToDramAndSsd) {
  const std::string probe = GpuTier::ProbeReason();
  std::cout << "[   INFO   ] GpuTier probe: " << probe << "\n";
  const bool device = HaveDevice();
  if (!device && EnvFlag("MOONCAKE_REQUIRE_GPU")) {
    ADD_FAILURE() << "MOONCAKE_REQUIRE_GPU is set but no GPU is usable: " << probe;
  }

  // Given a worker asked for 64 MiB of VRAM.
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker(
      "w1", {.dram = 32 * kMiB,
             .ssd = 64 * kMiB,
             .extra_args = {"--vram-capacity", "64MiB", "--gpu-device",
                            std::to_string(TestDeviceIndex()), "--dram-pin-for-vram"}}));
  auto client = cluster.NewClient("w1");
  ASSERT_TRUE(client);
  auto stats = client->Stats("w1");
  ASSERT_TRUE(IsOk(stats));
  const std::string log = cluster.LogTail("w1", 400);

  if (device) {
    // With a device the tier is on, first, with the asked-for capacity.
    EXPECT_EQ(TierKinds(*stats), (std::vector<std::string>{"vram", "dram", "ssd"})) << log;
    const TierCounters* vram = FindTier(*stats, "vram");
    ASSERT_NE(vram, nullptr);
    EXPECT_EQ(vram->usage.capacity, 64 * kMiB);
    EXPECT_NE(log.find("vram tier ready"), std::string::npos) << log;
    EXPECT_NE(log.find("pinned host memory bytes=33554432"), std::string::npos) << log;
    ASSERT_TRUE(IsOk(client->Put("k", PatternBytes(1, 100 * kKiB), {.preferred_tier = "vram"})));
    auto info = client->Inspect("k");
    ASSERT_TRUE(IsOk(info));
    EXPECT_EQ(info->tier, "vram");
    EXPECT_TRUE(ReadsBack(*client, "k", PatternBytes(1, 100 * kKiB)));
    return;
  }

  // Expect it up without VRAM, saying why in its log.
  EXPECT_EQ(TierKinds(*stats), (std::vector<std::string>{"dram", "ssd"}));
  EXPECT_EQ(FindTier(*stats, "vram"), nullptr);
  EXPECT_NE(log.find("vram tier disabled capacity=67108864"), std::string::npos) << log;
  EXPECT_NE(log.find(probe), std::string::npos)
      << "the worker's log does not give the probe's reason (" << probe << "):\n"
      << log;
  EXPECT_NE(log.find("--dram-pin-for-vram ignored"), std::string::npos) << log;

  // And puts and gets served from DRAM, and from SSD for what DRAM cannot hold.
  const std::string small = PatternBytes(2, kMiB + 17);
  const std::string large = PatternBytes(3, 40 * kMiB);
  ASSERT_TRUE(IsOk(client->Put("small", small)));
  ASSERT_TRUE(IsOk(client->Put("large", large)));
  auto small_info = client->Inspect("small");
  auto large_info = client->Inspect("large");
  ASSERT_TRUE(IsOk(small_info) && IsOk(large_info));
  EXPECT_EQ(small_info->tier, "dram");
  EXPECT_EQ(large_info->tier, "ssd");
  EXPECT_TRUE(ReadsBack(*client, "small", small));
  EXPECT_TRUE(ReadsBack(*client, "large", large));
  EXPECT_TRUE(IsOk(client->Put("in-dram", "x", {.preferred_tier = "dram"})));

  // A put or a plan that insists on VRAM is refused, clearly.
  EXPECT_TRUE(
      FailsWith(client->Put("v", "x", {.preferred_tier = "vram"}), ErrorCode::kTierNotFound));
  EXPECT_TRUE(FailsWith(client->OpenForWrite("v", 4096, {.preferred_tier = "vram"}),
                        ErrorCode::kTierNotFound));
  EXPECT_TRUE(NotReadable(client->Get("v")));

  // A plan goes to the DRAM arena, as a host file this process can map.
  const std::string planned = PatternBytes(4, 3 * kMiB + 5);
  auto plan = client->OpenForWrite("plan", planned.size());
  ASSERT_TRUE(IsOk(plan));
  EXPECT_EQ(plan->tier, "dram");
  EXPECT_EQ(plan->node_id, "w1");
  EXPECT_EQ(plan->memory.kind, MemoryRegionHandle::Kind::kHostFile);
  EXPECT_FALSE(plan->memory.path.empty());
  EXPECT_TRUE(plan->memory.ipc_handle.empty());
  EXPECT_EQ(plan->memory.region_size, 32 * kMiB);
  ASSERT_TRUE(Produce(*plan, planned));
  EXPECT_TRUE(NotReadable(client->Get("plan")));
  ASSERT_TRUE(IsOk(client->Commit(*plan)));
  EXPECT_TRUE(ReadsBack(*client, "plan", planned));
}

// ---------------------------------------------------------------------------
// Need a device.

class GpuWorkerDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOONCAKE_SKIP_WITHOUT_GPU();
    device_ = TestDeviceIndex();
  }

  // Given a master and a worker w1 with `vram` bytes of VRAM, plus `extra`
  // worker flags; fails unless the worker really has the VRAM tier.
  void GivenAVramWorker(uint64_t vram, std::vector<std::string> extra = {}) {
    ASSERT_TRUE(cluster_.StartMaster());
    std::vector<std::string> args = {"--vram-capacity", std::to_string(vram), "--gpu-device",
                                     std::to_string(device_)};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_TRUE(cluster_.StartWorker(
        "w1", {.dram = 64 * kMiB, .ssd = 128 * kMiB, .extra_args = std::move(args)}));
    client_ = cluster_.NewClient("w1");
    ASSERT_TRUE(client_);
    auto stats = client_->Stats("w1");
    ASSERT_TRUE(IsOk(stats));
    const TierCounters* tier = FindTier(*stats, "vram");
    ASSERT_NE(tier, nullptr) << "w1 has no VRAM tier although this process sees a device ("
                             << GpuTier::ProbeReason() << "):\n"
                             << cluster_.LogTail("w1", 60);
    ASSERT_EQ(tier->usage.capacity, vram);
    ASSERT_EQ(stats->tiers.front().usage.kind, "vram");
  }

  WorkerCounters Stats() {
    auto stats = client_->Stats("w1");
    EXPECT_TRUE(IsOk(stats));
    return stats ? *stats : WorkerCounters{};
  }
  std::string TierOf(const std::string& key) {
    auto info = client_->Inspect(key);
    return info ? info->tier : "(" + std::string(ToString(info.error())) + ")";
  }

  // Puts past the VRAM watermark, expects the coldest objects demoted to
  // DRAM, and one read back into VRAM with its bytes intact.
  void ExpectDemotionToDramAndPromotionBack(std::vector<std::string> extra);

  int device_ = 0;
  TestCluster cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(GpuWorkerDeviceTest, APlanWrittenByAnotherProcessIntoVramIsPublishedByCommit) {
  ASSERT_NO_FATAL_FAILURE(GivenAVramWorker(32 * kMiB));
  // When this process opens a plan for 5 MiB + 3 (more than the worker's
  // staging buffer), maps the device region and writes it.
  const std::string value = PatternBytes(10, 5 * kMiB + 3);
  auto plan = client_->OpenForWrite("gpu-plan", value.size());
  ASSERT_TRUE(IsOk(plan));
  EXPECT_EQ(plan->node_id, "w1");
  EXPECT_EQ(plan->tier, "vram");
  EXPECT_EQ(plan->size, value.size());
  EXPECT_EQ(plan->memory.kind, MemoryRegionHandle::Kind::kDeviceIpc);
  EXPECT_EQ(plan->memory.ipc_handle.size(), 64u);
  EXPECT_EQ(plan->memory.device_index, device_);
  EXPECT_EQ(plan->memory.region_size, 32 * kMiB);
  EXPECT_EQ(plan->memory.machine_id, MachineId());  // same machine: mappable
  EXPECT_GT(plan->timeout_ms, 0);
  {
    std::string why;
    auto mapping = SharedMapping::Map(plan->memory, plan->offset, value.size(), &why);
    ASSERT_TRUE(mapping) << ToString(mapping.error()) << ": " << why;
    EXPECT_TRUE((*mapping)->on_device());
    EXPECT_NE((*mapping)->device_pointer(), nullptr);
    EXPECT_TRUE((*mapping)->host_bytes().empty());
    ASSERT_TRUE(IsOk((*mapping)->CopyIn(0, Bytes(value))));
  }

  // Expect nothing visible before the commit...
  EXPECT_TRUE(NotReadable(client_->Get("gpu-plan")));
  auto exists = client_->Exist("gpu-plan");
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  EXPECT_FALSE(client_->GetLocation("gpu-plan").has_value());

  // ...and the exact bytes, in VRAM, after it.
  ASSERT_TRUE(IsOk(client_->Commit(*plan)));
  EXPECT_TRUE(ReadsBack(*client_, "gpu-plan", value));
  auto info = client_->Inspect("gpu-plan");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w1");
  EXPECT_EQ(info->tier, "vram");
  EXPECT_EQ(info->offset, static_cast<int64_t>(plan->offset));
  EXPECT_EQ(info->size, static_cast<int64_t>(value.size()));
  // A plan commits once.
  EXPECT_TRUE(FailsWith(client_->Commit(*plan), ErrorCode::kIllegalClient));
  EXPECT_TRUE(FailsWith(client_->OpenForWrite("gpu-plan", 16), ErrorCode::kObjectAlreadyExists));
}

TEST_F(GpuWorkerDeviceTest, GetLocationOfAVramObjectMapsToTheSameBytes) {
  ASSERT_NO_FATAL_FAILURE(GivenAVramWorker(32 * kMiB));
  const std::string value = PatternBytes(20, 3 * kMiB + 1);
  ASSERT_TRUE(IsOk(client_->Put("loc", value)));
  ASSERT_EQ(TierOf("loc"), "vram");

  auto placement = client_->GetLocation("loc");
  ASSERT_TRUE(IsOk(placement));
  EXPECT_EQ(placement->node_id, "w1");
  EXPECT_EQ(placement->tier, "vram");
  EXPECT_EQ(placement->memory.kind, MemoryRegionHandle::Kind::kDeviceIpc);
  EXPECT_EQ(placement->memory.ipc_handle.size(), 64u);
  EXPECT_EQ(placement->memory.device_index, device_);
  EXPECT_EQ(placement->size, value.size());
  EXPECT_GT(placement->hold_ms, 0);
  auto info = client_->Inspect("loc");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(static_cast<int64_t>(placement->offset), info->offset);
  EXPECT_EQ(placement->version, info->version);

  std::string why;
  auto seen = ReadPlacement(*placement, &why);
  ASSERT_TRUE(IsOk(seen)) << why;
  EXPECT_TRUE(*seen == value) << "the mapped device bytes differ from the value";

  // A DRAM object's placement is a host file with the same guarantee.
  const std::string host_value = PatternBytes(21, 70 * kKiB + 3);
  ASSERT_TRUE(IsOk(client_->Put("loc-dram", host_value, {.preferred_tier = "dram"})));
  auto host = client_->GetLocation("loc-dram");
  ASSERT_TRUE(IsOk(host));
  EXPECT_EQ(host->tier, "dram");
  EXPECT_EQ(host->memory.kind, MemoryRegionHandle::Kind::kHostFile);
  auto host_seen = ReadPlacement(*host, &why);
  ASSERT_TRUE(IsOk(host_seen)) << why;
  EXPECT_TRUE(*host_seen == host_value);
}

TEST_F(GpuWorkerDeviceTest, AnUncommittedPlanIsDiscardedAfterTheTimeout) {
  ASSERT_NO_FATAL_FAILURE(GivenAVramWorker(16 * kMiB, {"--put-start-discard-timeout-ms", "1000"}));
  auto vram_used = [&] {
    const TierCounters* vram = FindTier(Stats(), "vram");
    return vram != nullptr ? vram->usage.used : ~0ull;
  };
  const std::string value = PatternBytes(30, kMiB);
  auto plan = client_->OpenForWrite("late", value.size());
  ASSERT_TRUE(IsOk(plan));
  ASSERT_EQ(plan->tier, "vram");
  EXPECT_EQ(plan->timeout_ms, 1000);
  EXPECT_EQ(vram_used(), kMiB);  // reserved for the producer
  // The producer writes (a late one could still be writing after the
  // timeout: the space is quarantined, never handed to another object).
  ASSERT_TRUE(Produce(*plan, value));

  // The producer never commits: the worker discards the plan, then (after
  // a quarantine of another timeout, for a late producer) frees its space.
  EXPECT_TRUE(Eventually([&] { return vram_used() == 0; }, 10s, 50ms))
      << "VRAM still holds " << vram_used() << " bytes of an abandoned plan";
  EXPECT_TRUE(FailsWith(client_->Commit(*plan), ErrorCode::kIllegalClient));
  EXPECT_TRUE(NotReadable(client_->Get("late")));
  // The key is free again.
  ASSERT_TRUE(IsOk(client_->Put("late", "fresh")));
  EXPECT_TRUE(ReadsBack(*client_, "late", "fresh"));
}

TEST_F(GpuWorkerDeviceTest, VramDemotesToDramAboveItsWatermarkAndAGetPromotesBack) {
  ExpectDemotionToDramAndPromotionBack({});
}

TEST_F(GpuWorkerDeviceTest, WithThePinnedDramArenaObjectsMoveBetweenVramAndDramByteExact) {
  ExpectDemotionToDramAndPromotionBack({"--dram-pin-for-vram"});
  EXPECT_NE(cluster_.LogTail("w1", 400).find("pinned host memory bytes=67108864"),
            std::string::npos)
      << cluster_.LogTail("w1", 60);
}

void GpuWorkerDeviceTest::ExpectDemotionToDramAndPromotionBack(std::vector<std::string> extra) {
  // 8 MiB of VRAM, demoted from 4 MiB (high) down to 2 MiB (low).
  constexpr uint64_t kVram = 8 * kMiB;
  extra.insert(extra.end(), {"--high-watermark", "0.5", "--low-watermark", "0.25"});
  ASSERT_NO_FATAL_FAILURE(GivenAVramWorker(kVram, std::move(extra)));
  constexpr int kCount = 6;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(client_->Put("d" + std::to_string(i), PatternBytes(40 + i, kMiB)))) << i;
  }

  // Expect the worker's maintenance to move the coldest objects to DRAM.
  WorkerCounters stats;
  const bool demoted = Eventually([&] {
    stats = Stats();
    const TierCounters* vram = FindTier(stats, "vram");
    const TierCounters* dram = FindTier(stats, "dram");
    return vram != nullptr && dram != nullptr && vram->demotions_out > 0 &&
           vram->usage.used <= kVram / 2 && dram->usage.objects > 0 &&
           vram->usage.objects + dram->usage.objects == kCount;
  });
  const TierCounters* vram = FindTier(stats, "vram");
  const TierCounters* dram = FindTier(stats, "dram");
  ASSERT_TRUE(vram != nullptr && dram != nullptr);
  EXPECT_TRUE(demoted) << "vram used=" << vram->usage.used << " objects=" << vram->usage.objects
                       << " demotions_out=" << vram->demotions_out
                       << "; dram objects=" << dram->usage.objects;
  EXPECT_EQ(FindTier(stats, "ssd")->usage.objects, 0u) << "demotion skipped DRAM";
  std::string in_dram;
  int in_dram_index = -1;
  for (int i = 0; i < kCount; ++i) {
    const std::string tier = TierOf("d" + std::to_string(i));
    EXPECT_TRUE(tier == "vram" || tier == "dram") << "d" << i << " is on " << tier;
    if (tier == "dram" && in_dram.empty()) {
      in_dram = "d" + std::to_string(i);
      in_dram_index = i;
    }
  }
  ASSERT_FALSE(in_dram.empty()) << "Inspect shows no object in DRAM";
  EXPECT_EQ(in_dram_index, 0) << "the oldest object should have gone first";

  // When it is read, expect it back in VRAM and counted as a promotion.
  const int64_t promotions_before = vram->promotions_in;
  EXPECT_TRUE(ReadsBack(*client_, in_dram, PatternBytes(40 + in_dram_index, kMiB)));
  EXPECT_TRUE(Eventually([&] { return TierOf(in_dram) == "vram"; }))
      << in_dram << " is still on " << TierOf(in_dram) << " after a Get";
  EXPECT_TRUE(Eventually([&] {
    const TierCounters* t = FindTier(Stats(), "vram");
    return t != nullptr && t->promotions_in > promotions_before;
  }));
  // The promoted bytes in device memory are the value's.
  auto placement = client_->GetLocation(in_dram);
  ASSERT_TRUE(IsOk(placement));
  EXPECT_EQ(placement->tier, "vram");
  std::string why;
  auto seen = ReadPlacement(*placement, &why);
  ASSERT_TRUE(IsOk(seen)) << why;
  EXPECT_TRUE(*seen == PatternBytes(40 + in_dram_index, kMiB));
  // Nothing lost on the way.
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(ReadsBack(*client_, "d" + std::to_string(i), PatternBytes(40 + i, kMiB)));
  }
}

}  // namespace
}  // namespace mooncake::testing
