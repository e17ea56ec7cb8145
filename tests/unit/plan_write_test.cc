// Plan-based writes (OpenForWrite / CommitDirect), placement lookups
// (Locate) and the DRAM target of prefetch, over a real DRAM arena and a real
// RocksDB SSD tier. The producer here maps the worker's arena through
// SharedMapping exactly as a producer process would (through /proc); the
// cross-process case is in tests/integration/plan_write_process_test.cc.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#include "client/shared_mapping.h"
#include "tests/test_bytes.h"
#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {
namespace {

using mooncake::testing::Bytes;
using mooncake::testing::Pattern;

constexpr uint64_t kMiB = 1ull << 20;

using mooncake::testing::InMemoryDirectory;

MemoryRegionHandle ToHandle(const SharedRegion& region) {
  return {.kind = region.kind == SharedRegion::Kind::kHostFile
                      ? MemoryRegionHandle::Kind::kHostFile
                      : MemoryRegionHandle::Kind::kDeviceIpc,
          .path = region.path,
          .ipc_handle = region.ipc_handle,
          .device_index = region.device_index,
          .region_size = region.size,
          .machine_id = region.machine_id};
}

// A DRAM arena that reports itself as VRAM: the real GpuTier needs a device,
// and the prefetch-target rule only looks at a tier's kind.
class VramKindTier : public CacheTier {
 public:
  explicit VramKindTier(std::unique_ptr<DramTier> dram) : dram_(std::move(dram)) {}
  std::string_view name() const override { return "vram"; }
  TierKind kind() const override { return TierKind::kVram; }
  uint64_t capacity() const override { return dram_->capacity(); }
  uint64_t used() const override { return dram_->used(); }
  uint64_t object_count() const override { return dram_->object_count(); }
  Result<TierLocation> Allocate(uint64_t size) override { return dram_->Allocate(size); }
  void Free(const TierLocation& location) override { dram_->Free(location); }
  Result<void> Write(const TierLocation& l, uint64_t o, std::span<const std::byte> d) override {
    return dram_->Write(l, o, d);
  }
  Result<void> Read(const TierLocation& l, uint64_t o, std::span<std::byte> out) const override {
    return dram_->Read(l, o, out);
  }

 private:
  std::unique_ptr<DramTier> dram_;
};

class PlanWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mooncake-plan-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(uint64_t dram, uint64_t ssd, BackendOptions options = {}, uint64_t vram = 0) {
    backend_.reset();
    std::vector<std::unique_ptr<CacheTier>> tiers;
    if (vram > 0) {
      tiers.push_back(std::make_unique<VramKindTier>(DramTier::Create("vram", vram).value()));
    }
    if (dram > 0) tiers.push_back(std::move(DramTier::Create("dram", dram).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    options.kv_lease_ttl = options.kv_lease_ttl.count() ? options.kv_lease_ttl : Millis(0);
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    backend_->Recover();
  }
  // 8 MiB of DRAM, whose abandoned writes are discarded (and their space
  // quarantined) 100 ms after they stop.
  void OpenWithQuickDiscard() {
    BackendOptions options;
    options.put_start_discard_timeout = Millis(100);
    Open(8 * kMiB, 32 * kMiB, options);
  }

  // Writes `value` into the plan's space the way a producer process does.
  void Produce(const DirectWritePlan& plan, const std::string& value) {
    std::string why;
    auto mapping =
        SharedMapping::Map(ToHandle(plan.region), plan.target.location.offset, value.size(), &why);
    ASSERT_TRUE(mapping) << why;
    ASSERT_TRUE((*mapping)->CopyIn(0, Bytes(value)));
  }

  uint64_t DramUsed() { return backend_->Stats().tiers.at(0).used; }

  std::string dir_;
  InMemoryDirectory directory_;
  std::unique_ptr<TieredCacheBackend> backend_;
};

TEST_F(PlanWriteTest, AProducerWritesInPlaceAndCommitPublishes) {
  Open(8 * kMiB, 32 * kMiB);
  const std::string value = Pattern(kMiB + 123, 1);
  auto plan = backend_->OpenForWrite("p", value.size(), {});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->target.tier_name, "dram");
  EXPECT_EQ(plan->region.kind, SharedRegion::Kind::kHostFile);
  EXPECT_EQ(plan->region.size, 8 * kMiB);
  ASSERT_NO_FATAL_FAILURE(Produce(*plan, value));

  // Written but not committed: invisible to readers and to the master.
  EXPECT_EQ(backend_->Get("p", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_FALSE(directory_.Owns("p"));
  ASSERT_TRUE(backend_->CommitDirect(plan->epoch, "p"));
  EXPECT_TRUE(directory_.Owns("p"));
  std::string read;
  for (uint64_t offset = 0; offset < value.size(); offset += kRpcChunkBytes) {
    read += backend_->Get("p", offset, 0).value().data;
  }
  EXPECT_EQ(read, value);
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "p").error(), ErrorCode::kIllegalClient);
}

TEST_F(PlanWriteTest, CommitChecksTheKeyAndTheKindOfWrite) {
  Open(8 * kMiB, 32 * kMiB);
  auto plan = backend_->OpenForWrite("k", 100, {});
  ASSERT_TRUE(plan);
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "other").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->CommitDirect(plan->epoch + 999, "k").error(), ErrorCode::kIllegalClient);
  // A chunked write must send its bytes; it cannot be committed blind.
  auto chunked = backend_->PutStart("c", 100, {});
  ASSERT_TRUE(chunked);
  EXPECT_EQ(backend_->CommitDirect(*chunked, "c").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(backend_->Get("c", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  // The plan itself is still open and commits.
  EXPECT_TRUE(backend_->CommitDirect(plan->epoch, "k"));
}

TEST_F(PlanWriteTest, PlansUseOnlyTiersThatCanShareTheirMemory) {
  Open(/*dram=*/0, 32 * kMiB);  // SSD only
  EXPECT_EQ(backend_->OpenForWrite("k", 100, {}).error(), ErrorCode::kTierNotFound);
  Open(4 * kMiB, 32 * kMiB);
  EXPECT_EQ(backend_->OpenForWrite("k", 100, {.preferred_tier = 1}).error(),
            ErrorCode::kTierNotFound);
  // Bigger than every shareable tier: no room, even though the SSD has it.
  EXPECT_EQ(backend_->OpenForWrite("k", 8 * kMiB, {}).error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(backend_->OpenForWrite("", 100, {}).error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(backend_->OpenForWrite("k", 0, {}).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(DramUsed(), 0u);
}

// A fast tier that cannot share its memory (here a VRAM-kind tier whose
// arena is not exported) is passed over: the plan lands in DRAM.
TEST_F(PlanWriteTest, APlanSkipsAFasterTierThatCannotShare) {
  Open(8 * kMiB, 32 * kMiB, {}, /*vram=*/8 * kMiB);
  auto plan = backend_->OpenForWrite("skip", kMiB, {});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->target.tier_name, "dram");
  EXPECT_EQ(plan->region.kind, SharedRegion::Kind::kHostFile);
  ASSERT_NO_FATAL_FAILURE(Produce(*plan, Pattern(kMiB, 9)));
  ASSERT_TRUE(backend_->CommitDirect(plan->epoch, "skip"));
  EXPECT_EQ(backend_->Get("skip", 0, 0)->data, Pattern(kMiB, 9));
  EXPECT_EQ(backend_->OpenForWrite("v", 10, {.preferred_tier = 0}).error(),
            ErrorCode::kTierNotFound);
}

TEST_F(PlanWriteTest, AnAbandonedPlanIsDiscardedAndItsSpaceQuarantined) {
  OpenWithQuickDiscard();
  auto plan = backend_->OpenForWrite("late", kMiB, {});
  ASSERT_TRUE(plan);
  std::this_thread::sleep_for(Millis(150));
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "late").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Inspect("late").error(), ErrorCode::kObjectNotFound);
  // A late producer may still be writing: its space is not handed out yet.
  EXPECT_EQ(DramUsed(), kMiB);
  auto next = backend_->OpenForWrite("next", kMiB, {});
  ASSERT_TRUE(next);
  EXPECT_NE(next->target.location.offset, plan->target.location.offset);
  ASSERT_TRUE(backend_->PutRevoke(next->epoch));  // the writer gave it back: freed at once
  EXPECT_EQ(DramUsed(), kMiB);
  std::this_thread::sleep_for(Millis(150));
  backend_->RunMaintenance();
  EXPECT_EQ(DramUsed(), 0u);
}

// A peer's RDMA WRITE into an adopted allocation may still land after the
// adopt was dropped, so its space waits out a timeout like a plan's.
TEST_F(PlanWriteTest, AnAbandonedAdoptIsQuarantinedLikeAPlan) {
  OpenWithQuickDiscard();
  auto adopt = backend_->PutStart("moved", kMiB, {}, WriteMode::kAdopt, {.version = 9});
  ASSERT_TRUE(adopt);
  std::this_thread::sleep_for(Millis(150));
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->CommitDirect(*adopt, "").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(DramUsed(), kMiB);
  std::this_thread::sleep_for(Millis(150));
  backend_->RunMaintenance();
  EXPECT_EQ(DramUsed(), 0u);
}

// Removing a key whose plan is open ends the plan, but its producer may
// still be writing through its mapping: the space waits out the timeout as
// an abandoned plan's does, and is never handed to the next write at once.
TEST_F(PlanWriteTest, ARemovedPlansSpaceIsQuarantinedLikeAnAbandonedOnes) {
  OpenWithQuickDiscard();
  auto plan = backend_->OpenForWrite("gone", kMiB, {});
  ASSERT_TRUE(plan);
  ASSERT_TRUE(backend_->Remove("gone", /*force=*/true));
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "gone").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(DramUsed(), kMiB);
  auto next = backend_->OpenForWrite("next", kMiB, {});
  ASSERT_TRUE(next);
  EXPECT_NE(next->target.location.offset, plan->target.location.offset);
  ASSERT_TRUE(backend_->PutRevoke(next->epoch));
  std::this_thread::sleep_for(Millis(150));
  backend_->RunMaintenance();
  EXPECT_EQ(DramUsed(), 0u);
}

TEST_F(PlanWriteTest, AnUpsertPreemptsAnOpenPlan) {
  Open(8 * kMiB, 32 * kMiB);
  auto plan = backend_->OpenForWrite("u", kMiB, {});
  ASSERT_TRUE(plan);
  const std::string value = Pattern(kMiB, 2);
  ASSERT_TRUE(backend_->Upsert("u", value, {}));
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "u").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Get("u", 0, 0)->data, value);
  // The pre-empted producer's space was neither reused nor freed.
  EXPECT_NE(backend_->Inspect("u")->offset, plan->target.location.offset);
  EXPECT_EQ(DramUsed(), 2 * kMiB);
}

TEST_F(PlanWriteTest, AnUpsertPlanOfTheSameSizeWritesOverTheObject) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("v", Pattern(4096, 3), {.hard_pin = false}));
  auto before = backend_->Inspect("v").value();
  auto plan = backend_->OpenForWrite("v", 4096, {}, WriteMode::kUpsert);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->target.location.offset, before.offset);
  EXPECT_EQ(backend_->Get("v", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  const std::string value = Pattern(4096, 4);
  ASSERT_NO_FATAL_FAILURE(Produce(*plan, value));
  ASSERT_TRUE(backend_->CommitDirect(plan->epoch, "v"));
  auto read = backend_->Get("v", 0, 0);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->data, value);
  EXPECT_GT(read->version, before.version);
  EXPECT_EQ(backend_->OpenForWrite("v", 4096, {}).error(), ErrorCode::kObjectAlreadyExists);
}

TEST_F(PlanWriteTest, LocateReturnsAMappablePlacementAndHoldsIt) {
  BackendOptions options;
  options.kv_lease_ttl = Millis(60000);
  Open(4 * kMiB, 32 * kMiB, options, /*vram=*/4 * kMiB);
  const std::string value = Pattern(kMiB, 5);
  ASSERT_TRUE(backend_->Put("held", value, {.preferred_tier = 1}));
  auto placement = backend_->Locate("held");
  ASSERT_TRUE(placement);
  EXPECT_EQ(placement->where.tier_name, "dram");
  EXPECT_EQ(placement->size, kMiB);
  ASSERT_TRUE(placement->region.has_value());
  EXPECT_EQ(placement->hold, Millis(60000));
  std::string why;
  auto mapping = SharedMapping::Map(ToHandle(*placement->region), placement->where.location.offset,
                                    kMiB, &why);
  ASSERT_TRUE(mapping) << why;
  std::string seen(kMiB, '\0');
  ASSERT_TRUE((*mapping)->CopyOut(0, std::as_writable_bytes(std::span(seen.data(), seen.size()))));
  EXPECT_EQ(seen, value);
  // Held: neither a read's promotion nor an operator's evict moves it out
  // from under the reader.
  ASSERT_TRUE(backend_->Get("held", 0, 0));
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->Inspect("held")->tier, "dram");
  EXPECT_EQ(backend_->EvictTier("dram", 0.0).value(), 0u);
  EXPECT_EQ(backend_->Inspect("held")->tier, "dram");
  // Unheld objects still move: the control for the check above.
  ASSERT_TRUE(backend_->Put("free", value, {.preferred_tier = 1}));
  ASSERT_TRUE(backend_->Get("free", 0, 0));
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->Inspect("free")->tier, "vram");
  EXPECT_EQ(backend_->Locate("missing").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(backend_->Locate("").error(), ErrorCode::kInvalidKey);
}

TEST_F(PlanWriteTest, AnSsdPlacementHasNoRegionAndIsNotHeld) {
  Open(2 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("cold", Pattern(kMiB, 6), {.preferred_tier = 1}));
  auto placement = backend_->Locate("cold");
  ASSERT_TRUE(placement);
  EXPECT_EQ(placement->where.tier_name, "ssd");
  EXPECT_FALSE(placement->region.has_value());
}

TEST_F(PlanWriteTest, PrefetchBringsAnSsdObjectToDramNotToVram) {
  Open(8 * kMiB, 32 * kMiB, {}, /*vram=*/8 * kMiB);
  ASSERT_TRUE(backend_->Put("pf", Pattern(kMiB, 7), {.preferred_tier = 2}));
  ASSERT_EQ(backend_->Inspect("pf")->tier, "ssd");
  ASSERT_TRUE(backend_->Exist("pf", /*prefetch=*/true).value());
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->Inspect("pf")->tier, "dram");
  EXPECT_EQ(backend_->Stats().prefetch_succeeded, 1u);
  // An ordinary read still promotes to the fastest tier.
  ASSERT_TRUE(backend_->Get("pf", 0, 0));
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->Inspect("pf")->tier, "vram");
}

TEST(DramTierShareTest, TheArenaIsExportedAsAMappableFile) {
  auto tier = DramTier::Create("dram", 4 * kMiB).value();
  auto region = tier->ExportRegion();
  ASSERT_TRUE(region);
  EXPECT_EQ(region->kind, SharedRegion::Kind::kHostFile);
  auto location = tier->Allocate(10000).value();
  const std::string value = Pattern(10000, 8);
  ASSERT_TRUE(tier->Write(location, 0, Bytes(value)));
  // A second, independent mapping of the same pages sees the tier's bytes,
  // and the tier sees what is written through it.
  auto mapping = SharedMapping::Map(ToHandle(*region), location.offset, 10000).value();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapping->host_bytes().data()), 10000), value);
  ASSERT_TRUE(mapping->CopyIn(5000, Bytes(std::string("hello"))));
  std::string back(5, '\0');
  ASSERT_TRUE(tier->Read(location, 5000, std::as_writable_bytes(std::span(back.data(), 5))));
  EXPECT_EQ(back, "hello");
  EXPECT_EQ(mapping->CopyIn(9999, Bytes(std::string("xy"))).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(SharedMapping::Map(ToHandle(*region), 4 * kMiB - 10, 11).error(),
            ErrorCode::kInvalidParams);
  MemoryRegionHandle gone = ToHandle(*region);
  gone.path = "/proc/self/fd/999999";
  EXPECT_EQ(SharedMapping::Map(gone, 0, 10).error(), ErrorCode::kTransferFail);
}

// A handle names a process's fd: on another machine, or after the worker
// died and its pid was reused, the same path is some other file. Mapping
// must refuse rather than write into it.
TEST(DramTierShareTest, AHandleMapsOnlyTheWorkersArenaOnItsOwnMachine) {
  auto tier = DramTier::Create("dram", 4 * kMiB).value();
  MemoryRegionHandle handle = ToHandle(tier->ExportRegion().value());
  std::string why;

  MemoryRegionHandle elsewhere = handle;
  elsewhere.machine_id = "another-machine";
  EXPECT_EQ(SharedMapping::Map(elsewhere, 0, 10, &why).error(), ErrorCode::kInvalidParams);
  EXPECT_NE(why.find("another machine"), std::string::npos) << why;

  // An ordinary file of the same size, reached through /proc like an arena.
  char path[] = "/tmp/mooncake-not-arena-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * kMiB), 0);
  MemoryRegionHandle impostor = handle;
  impostor.path = "/proc/self/fd/" + std::to_string(fd);
  EXPECT_EQ(SharedMapping::Map(impostor, 0, 10, &why).error(), ErrorCode::kTransferFail);
  EXPECT_NE(why.find("not the worker's arena"), std::string::npos) << why;
  close(fd);
  unlink(path);

  MemoryRegionHandle wrong_size = handle;
  wrong_size.region_size = 8 * kMiB;
  EXPECT_EQ(SharedMapping::Map(wrong_size, 0, 10).error(), ErrorCode::kTransferFail);
  EXPECT_TRUE(SharedMapping::Map(handle, 0, 10));
}

}  // namespace
}  // namespace mooncake
