// TieredCacheBackend over a real VRAM tier (GpuTier, "vram"), a real DRAM
// arena ("dram") and a real RocksDB SSD tier ("ssd"): placement, demotion,
// promotion, pins, prefetch and plan-based writes with device memory.
//
// Tests that need a device skip, printing why, when no HIP device answers (a
// build without HIP, no driver, no GPU). On a GPU machine where a skip would
// hide a broken set-up, set MOONCAKE_REQUIRE_GPU=1 to turn those skips into
// failures. MOONCAKE_GPU_DEVICE picks the device (default 0). Mapping the
// VRAM arena through its IPC handle needs a second process (CUDA refuses to
// open a handle in the process that exported it): that path is covered by
// tests/integration/gpu_worker_test.cc; here the producer of a plan writes
// the device bytes through the tier itself.
//
// WorkerServerTiersTest runs everywhere: it starts a WorkerServer in this
// process with a VRAM capacity and checks the tiers it opened.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/machine_id.h"
#include "tests/device_env.h"
#include "tests/test_bytes.h"
#include "tests/unit/in_memory_directory.h"
#include "tests/unused_port.h"
#include "tiers/dram_tier.h"
#include "tiers/gpu_tier.h"
#include "tiers/ssd_tier.h"
#include "worker/tiered_cache_backend.h"
#include "worker/worker_config.h"
#include "worker/worker_server.h"

namespace mooncake {
namespace {

using mooncake::testing::Bytes;
using mooncake::testing::Pattern;

using mooncake::testing::UnusedPort;

using mooncake::testing::EnvFlag;
using mooncake::testing::HaveDevice;
using mooncake::testing::TestDeviceIndex;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;

using mooncake::testing::InMemoryDirectory;

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOONCAKE_SKIP_WITHOUT_GPU();
    device_ = TestDeviceIndex();
    char tmpl[] = "/tmp/mooncake-gpu-backend-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    backend_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static BackendOptions DefaultOptions() {
    BackendOptions options;
    options.kv_lease_ttl = Millis(0);  // leases would keep victims in place
    return options;
  }

  // Tiers fastest first: vram, dram, ssd (the SSD reopens dir_/ssd).
  void Open(uint64_t vram, uint64_t dram, uint64_t ssd, BackendOptions options = DefaultOptions()) {
    backend_.reset();
    gpu_ = nullptr;
    std::vector<std::unique_ptr<CacheTier>> tiers;
    std::string why;
    auto gpu = GpuTier::Create("vram", vram, device_, &why);
    ASSERT_TRUE(gpu) << "GpuTier::Create: " << why;
    gpu_ = gpu->get();
    tiers.push_back(std::move(*gpu));
    auto dram_tier = DramTier::Create("dram", dram).value();
    if (pin_dram_) {  // as the worker's --dram-pin-for-vram
      std::span arena(dram_tier->arena_base(), dram_tier->arena_size());
      ASSERT_TRUE(gpu_->RegisterHostRange(arena, &why)) << why;
    }
    tiers.push_back(std::move(dram_tier));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    recovered_ = backend_->Recover();
  }

  std::string TierOf(const std::string& key) {
    auto info = backend_->Inspect(key);
    return info ? info->tier : "(" + std::string(ToString(info.error())) + ")";
  }
  TierSnapshot Tier(size_t i) { return backend_->Stats().tiers.at(i); }

  // The whole object through Get, in RPC-sized slices.
  std::string ReadAll(const std::string& key) {
    std::string out;
    while (true) {
      auto slice = backend_->Get(key, out.size(), 0);
      if (!slice) {
        ADD_FAILURE() << "Get(" << key << ", " << out.size()
                      << ") failed: " << ToString(slice.error());
        return out;
      }
      out += slice->data;
      if (out.size() >= slice->total_size || slice->data.empty()) return out;
    }
  }

  // The object's bytes as they lie in device memory, read through the tier
  // at the offset the backend reports: proof that the bytes are in VRAM.
  std::string ReadDevice(const std::string& key) {
    auto info = backend_->Inspect(key);
    if (!info || info->tier != "vram") {
      ADD_FAILURE() << key << " is not in vram: " << TierOf(key);
      return {};
    }
    std::string out(info->size, '\0');
    auto read = gpu_->Read({.offset = info->offset, .size = info->size}, 0,
                           std::as_writable_bytes(std::span(out.data(), out.size())));
    EXPECT_TRUE(read) << "device read of " << key << " failed";
    return out;
  }

  int device_ = 0;
  bool pin_dram_ = false;  // register the DRAM arena with the VRAM tier
  std::string dir_;
  InMemoryDirectory directory_;
  GpuTier* gpu_ = nullptr;  // owned by backend_
  std::unique_ptr<TieredCacheBackend> backend_;
  std::vector<std::string> recovered_;
};

TEST_F(GpuBackendTest, PutGetRoundTripsByteForByteThroughVram) {
  ASSERT_NO_FATAL_FAILURE(Open(64 * kMiB, 16 * kMiB, 64 * kMiB));
  ASSERT_EQ(Tier(0).name, "vram");
  ASSERT_EQ(Tier(0).kind, TierKind::kVram);
  // Odd sizes, sizes around the staging halves (2 MiB) and the whole
  // staging buffer (4 MiB, also one RPC chunk), and beyond both.
  const uint64_t half = GpuTier::kStagingBytes / 2;
  const std::vector<uint64_t> sizes = {1,
                                       7,
                                       255,
                                       257,
                                       4093,
                                       64 * kKiB + 1,
                                       half - 1,
                                       half + 1,
                                       GpuTier::kStagingBytes,
                                       GpuTier::kStagingBytes + 1,
                                       9 * kMiB + 13};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = "rt" + std::to_string(i);
    SCOPED_TRACE(key + " size " + std::to_string(sizes[i]));
    const std::string value = Pattern(sizes[i], 100 + i);
    ASSERT_TRUE(backend_->Put(key, value, {}));
    EXPECT_EQ(TierOf(key), "vram");
    EXPECT_TRUE(directory_.Owns(key));
    EXPECT_TRUE(ReadAll(key) == value) << "Get returned other bytes";
    EXPECT_TRUE(ReadDevice(key) == value) << "device memory holds other bytes";
    // A ranged read from the middle, across the staging halves.
    if (sizes[i] > 10) {
      auto slice = backend_->Get(key, sizes[i] / 3, sizes[i] / 2);
      ASSERT_TRUE(slice);
      EXPECT_TRUE(slice->data ==
                  value.substr(sizes[i] / 3, std::min<uint64_t>(sizes[i] / 2, kRpcChunkBytes)));
    }
  }
  EXPECT_EQ(Tier(0).objects, sizes.size());
  EXPECT_EQ(Tier(1).objects, 0u);
  EXPECT_EQ(Tier(2).objects, 0u);
  EXPECT_GE(Tier(0).hits, sizes.size());
  // Removing gives the device space back.
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(backend_->Remove("rt" + std::to_string(i), /*force=*/false));
  }
  EXPECT_EQ(Tier(0).used, 0u);
  EXPECT_EQ(gpu_->used(), 0u);
}

// What a worker's Get does: a VRAM object is read into a pinned buffer
// the tier lends (one DMA) and visited there.
TEST_F(GpuBackendTest, ReadInPlaceOfAVramObjectVisitsItsBytesByOneDma) {
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB, 16 * kMiB, 64 * kMiB));
  const std::string value = Pattern(2 * kMiB + 5, 61);
  ASSERT_TRUE(backend_->Put("v", value, {}));
  ASSERT_EQ(TierOf("v"), "vram");
  const uint64_t direct = gpu_->direct_transfers();
  std::string seen;
  auto read = backend_->ReadInPlace("v", 0, 0, [&](const ReadInfo& info, auto bytes) {
    EXPECT_EQ(info.total_size, value.size());
    seen.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  });
  ASSERT_TRUE(read) << ToString(read.error());
  EXPECT_TRUE(seen == value);
  EXPECT_EQ(gpu_->direct_transfers(), direct + 1);
  // A range of it, likewise.
  read = backend_->ReadInPlace("v", 1000, 4096, [&](const ReadInfo&, auto bytes) {
    seen.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  });
  ASSERT_TRUE(read);
  EXPECT_TRUE(seen == value.substr(1000, 4096));
}

// What a worker's BatchGet does: VRAM objects are copied out, every one
// exact (no lent buffers: they are for single gets).
TEST_F(GpuBackendTest, ReadManyInPlaceOfVramObjectsCopiesEachOneExactly) {
  ASSERT_NO_FATAL_FAILURE(Open(32 * kMiB, 16 * kMiB, 64 * kMiB));
  constexpr int kKeys = GpuTier::kReadBuffers + 3;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back("m" + std::to_string(i));
    ASSERT_TRUE(backend_->Put(keys.back(), Pattern(100 * 1024 + i, 70 + i), {}));
    ASSERT_EQ(TierOf(keys.back()), "vram");
  }
  std::vector<std::string> seen;
  backend_->ReadManyInPlace(keys, 64 * kMiB, [&](std::span<const ReadPiece> pieces) {
    for (const ReadPiece& piece : pieces) {
      EXPECT_TRUE(piece.info.has_value());
      seen.emplace_back(reinterpret_cast<const char*>(piece.bytes.data()), piece.bytes.size());
    }
  });
  ASSERT_EQ(seen.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(seen[i] == Pattern(100 * 1024 + i, 70 + i)) << i;
}

TEST_F(GpuBackendTest, PreferredTierPicksWhereAPutLands) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 8 * kMiB, 64 * kMiB));
  EXPECT_EQ(backend_->TierIndex("vram"), 0);
  EXPECT_EQ(backend_->TierIndex("dram"), 1);
  EXPECT_EQ(backend_->TierIndex("ssd"), 2);
  const std::string value = Pattern(100 * kKiB + 3, 1);
  ASSERT_TRUE(backend_->Put("fastest", value, {}));
  ASSERT_TRUE(backend_->Put("tier0", value, {.preferred_tier = 0}));
  ASSERT_TRUE(backend_->Put("tier1", value, {.preferred_tier = 1}));
  ASSERT_TRUE(backend_->Put("tier2", value, {.preferred_tier = 2}));
  EXPECT_EQ(TierOf("fastest"), "vram");
  EXPECT_EQ(TierOf("tier0"), "vram");
  EXPECT_EQ(TierOf("tier1"), "dram");
  EXPECT_EQ(TierOf("tier2"), "ssd");
  for (const char* key : {"fastest", "tier0", "tier1", "tier2"}) {
    EXPECT_TRUE(ReadAll(key) == value) << key;
  }
  EXPECT_TRUE(ReadDevice("tier0") == value);
  EXPECT_EQ(gpu_->object_count(), 2u);
  // Too big for VRAM: it falls back to the next tier with room.
  ASSERT_TRUE(backend_->Put("big", Pattern(8 * kMiB + 1, 2), {.preferred_tier = 0}));
  EXPECT_EQ(TierOf("big"), "ssd");
  EXPECT_EQ(backend_->Put("bad", value, {.preferred_tier = 3}).error(), ErrorCode::kTierNotFound);
}

TEST_F(GpuBackendTest, MaintenanceDemotesVramToDramAboveTheHighWatermarkLruFirst) {
  BackendOptions options = DefaultOptions();
  options.high_watermark = 0.5;
  options.low_watermark = 0.25;
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 32 * kMiB, 64 * kMiB, options));
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("w" + std::to_string(i), Pattern(kMiB, 10 + i), {}));
    std::this_thread::sleep_for(Millis(2));  // distinct last-access times
  }
  ASSERT_TRUE(backend_->Get("w0", 0, 0));  // w0 becomes the most recently used
  EXPECT_EQ(Tier(0).used, 6 * kMiB);       // above high (4 MiB): nothing failed yet
  for (int i = 0; i < 6; ++i) ASSERT_EQ(TierOf("w" + std::to_string(i)), "vram") << i;

  backend_->RunMaintenance();
  // Down to low (2 MiB): the four least recently used went to DRAM, in LRU
  // order, not to SSD.
  EXPECT_LE(Tier(0).used, 2 * kMiB);
  for (int i : {1, 2, 3, 4}) EXPECT_EQ(TierOf("w" + std::to_string(i)), "dram") << i;
  EXPECT_EQ(TierOf("w0"), "vram");
  EXPECT_EQ(TierOf("w5"), "vram");
  EXPECT_EQ(Tier(0).demotions_out, 4u);
  EXPECT_EQ(Tier(1).objects, 4u);
  EXPECT_EQ(Tier(2).objects, 0u);
  // A second pass finds nothing above the high watermark and moves nothing.
  backend_->RunMaintenance();
  EXPECT_EQ(Tier(0).demotions_out, 4u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(ReadAll("w" + std::to_string(i)) == Pattern(kMiB, 10 + i)) << i;
  }
  EXPECT_EQ(gpu_->direct_transfers(), 0u) << "nothing registered: every transfer is staged";
}

TEST_F(GpuBackendTest, WithThePinnedDramArenaDemotionAndPromotionAreOneDmaAndByteExact) {
  pin_dram_ = true;
  BackendOptions options = DefaultOptions();
  options.high_watermark = 0.5;
  options.low_watermark = 0.25;
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 32 * kMiB, 64 * kMiB, options));
  constexpr uint64_t kSize = kMiB + 13;  // not a multiple of any chunk
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("q" + std::to_string(i), Pattern(kSize, 50 + i), {}));
    std::this_thread::sleep_for(Millis(2));
  }
  const uint64_t direct_before = gpu_->direct_transfers();

  // Demotion reads VRAM straight into the DRAM arena.
  backend_->RunMaintenance();
  ASSERT_GE(Tier(0).demotions_out, 1u);
  EXPECT_GE(gpu_->direct_transfers(), direct_before + Tier(0).demotions_out);
  std::string in_dram;
  int index = -1;
  for (int i = 0; i < 6 && in_dram.empty(); ++i) {
    if (TierOf("q" + std::to_string(i)) == "dram") index = i, in_dram = "q" + std::to_string(i);
  }
  ASSERT_FALSE(in_dram.empty());
  EXPECT_TRUE(ReadAll(in_dram) == Pattern(kSize, 50 + index));

  // Promotion writes the arena's bytes straight to VRAM.
  const uint64_t direct_demoted = gpu_->direct_transfers();
  backend_->RunMaintenance();  // the read above queued the promotion
  ASSERT_EQ(TierOf(in_dram), "vram");
  EXPECT_GT(gpu_->direct_transfers(), direct_demoted);
  EXPECT_TRUE(ReadDevice(in_dram) == Pattern(kSize, 50 + index));
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(ReadAll("q" + std::to_string(i)) == Pattern(kSize, 50 + i)) << i;
  }
}

TEST_F(GpuBackendTest, AllocationPressureDemotesTheLruVramObjectToDram) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB, 32 * kMiB, 64 * kMiB));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(backend_->Put("p" + std::to_string(i), Pattern(kMiB, 20 + i), {}));
    std::this_thread::sleep_for(Millis(2));
  }
  ASSERT_EQ(Tier(0).used, 4 * kMiB);  // full
  ASSERT_TRUE(backend_->Get("p0", 0, 0));
  std::this_thread::sleep_for(Millis(2));

  // No maintenance: the put itself must make room in VRAM.
  ASSERT_TRUE(backend_->Put("p4", Pattern(kMiB, 24), {}));
  EXPECT_EQ(TierOf("p4"), "vram");
  EXPECT_EQ(TierOf("p1"), "dram");  // least recently used
  EXPECT_EQ(TierOf("p0"), "vram");  // a recent read kept it up
  EXPECT_EQ(TierOf("p2"), "vram");
  EXPECT_EQ(TierOf("p3"), "vram");
  EXPECT_EQ(Tier(0).demotions_out, 1u);
  EXPECT_LE(Tier(0).used, 4 * kMiB);

  // One more: the next least recently used (p2) goes down.
  ASSERT_TRUE(backend_->Put("p5", Pattern(kMiB, 25), {}));
  EXPECT_EQ(TierOf("p2"), "dram");
  EXPECT_EQ(TierOf("p0"), "vram");
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(ReadAll("p" + std::to_string(i)) == Pattern(kMiB, 20 + i)) << i;
  }
  EXPECT_EQ(Tier(2).objects, 0u);  // DRAM had room: nothing reached SSD
}

TEST_F(GpuBackendTest, GetPromotesADramOrSsdObjectBackToVram) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 8 * kMiB, 64 * kMiB));
  const std::string in_dram = Pattern(kMiB + 11, 30);
  const std::string in_ssd = Pattern(3 * kMiB + 7, 31);
  ASSERT_TRUE(backend_->Put("from-dram", in_dram, {.preferred_tier = 1}));
  ASSERT_TRUE(backend_->Put("from-ssd", in_ssd, {.preferred_tier = 2}));
  ASSERT_EQ(TierOf("from-dram"), "dram");
  ASSERT_EQ(TierOf("from-ssd"), "ssd");

  EXPECT_TRUE(ReadAll("from-dram") == in_dram);
  EXPECT_TRUE(ReadAll("from-ssd") == in_ssd);
  EXPECT_EQ(Tier(1).hits, 1u);
  EXPECT_EQ(Tier(2).hits, 1u);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("from-dram"), "vram");
  EXPECT_EQ(TierOf("from-ssd"), "vram");
  EXPECT_EQ(Tier(0).promotions_in, 2u);
  EXPECT_EQ(Tier(1).objects, 0u);
  EXPECT_EQ(Tier(2).objects, 0u);
  EXPECT_TRUE(ReadDevice("from-dram") == in_dram);
  EXPECT_TRUE(ReadDevice("from-ssd") == in_ssd);
  EXPECT_TRUE(ReadAll("from-ssd") == in_ssd);
  EXPECT_EQ(Tier(0).hits, 1u);
}

TEST_F(GpuBackendTest, ADemotedObjectComesBackToVramOnGetPushingAColderOneDown) {
  BackendOptions options = DefaultOptions();
  options.high_watermark = 1.0;  // only allocation pressure moves objects
  options.low_watermark = 0.9;
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB, 32 * kMiB, 64 * kMiB, options));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(backend_->Put("c" + std::to_string(i), Pattern(kMiB, 40 + i), {}));
    std::this_thread::sleep_for(Millis(2));
  }
  ASSERT_EQ(TierOf("c0"), "dram");  // pushed down by c4
  ASSERT_TRUE(ReadAll("c0") == Pattern(kMiB, 40));
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("c0"), "vram");
  EXPECT_EQ(TierOf("c1"), "dram");  // the coldest VRAM object made room
  EXPECT_EQ(Tier(0).promotions_in, 1u);
  EXPECT_EQ(Tier(0).demotions_out, 2u);
  EXPECT_TRUE(ReadDevice("c0") == Pattern(kMiB, 40));
  EXPECT_TRUE(ReadAll("c1") == Pattern(kMiB, 41));
}

TEST_F(GpuBackendTest, AHardPinnedObjectStaysInVramAndIsWrittenThroughToSsd) {
  BackendOptions options = DefaultOptions();
  options.high_watermark = 0.5;
  options.low_watermark = 0.25;
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB, 32 * kMiB, 64 * kMiB, options));
  const std::string pinned = Pattern(kMiB + 5, 50);
  ASSERT_TRUE(backend_->Put("pinned", pinned, {.hard_pin = true}));
  EXPECT_EQ(TierOf("pinned"), "vram");
  EXPECT_TRUE(backend_->Inspect("pinned")->hard_pinned);
  // Written through: a durable copy sits on SSD while the object is in VRAM.
  EXPECT_EQ(Tier(2).objects, 1u);
  EXPECT_GE(Tier(2).used, pinned.size());
  EXPECT_EQ(Tier(0).pinned_bytes, pinned.size());

  // Pressure (puts that overflow VRAM), watermark maintenance and an
  // operator's evict all leave it in VRAM.
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("u" + std::to_string(i), Pattern(kMiB, 51 + i), {}));
    EXPECT_EQ(TierOf("pinned"), "vram") << "after u" << i;
  }
  EXPECT_GE(Tier(0).demotions_out, 1u);  // the pressure was real
  auto evicted = backend_->EvictTier("vram", 0.0);
  ASSERT_TRUE(evicted);
  EXPECT_GT(*evicted, 0u);  // the unpinned ones went down
  EXPECT_EQ(TierOf("pinned"), "vram");
  ASSERT_TRUE(backend_->Put("u6", Pattern(kMiB, 57), {}));  // above the high watermark
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("u6"), "dram");
  EXPECT_EQ(TierOf("pinned"), "vram");
  EXPECT_EQ(Tier(0).objects, 1u);  // only the pinned one is left
  EXPECT_TRUE(ReadDevice("pinned") == pinned);
  EXPECT_TRUE(ReadAll("pinned") == pinned);

  // The SSD copy is real: a restarted backend (a new, empty VRAM arena)
  // recovers the object, pin included, byte for byte.
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB, 32 * kMiB, 64 * kMiB, options));
  EXPECT_NE(std::find(recovered_.begin(), recovered_.end(), "pinned"), recovered_.end());
  auto info = backend_->Inspect("pinned");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->hard_pinned);
  EXPECT_TRUE(ReadAll("pinned") == pinned);
}

TEST_F(GpuBackendTest, APrefetchBringsAnSsdObjectToDramNotToVram) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 8 * kMiB, 64 * kMiB));
  const std::string value = Pattern(kMiB, 60);
  ASSERT_TRUE(backend_->Put("pf", value, {.preferred_tier = 2}));
  ASSERT_EQ(TierOf("pf"), "ssd");
  ASSERT_TRUE(backend_->Exist("pf", /*prefetch=*/true).value());
  EXPECT_EQ(backend_->Stats().prefetch_started, 1u);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("pf"), "dram");
  EXPECT_EQ(backend_->Stats().prefetch_succeeded, 1u);
  EXPECT_EQ(gpu_->object_count(), 0u);
  EXPECT_EQ(Tier(1).promotions_in, 1u);
  EXPECT_EQ(Tier(0).promotions_in, 0u);
  // A prefetch of an object already above SSD does nothing.
  ASSERT_TRUE(backend_->Exist("pf", /*prefetch=*/true).value());
  EXPECT_EQ(backend_->Stats().prefetch_skipped, 1u);
  // An ordinary read still promotes to VRAM.
  EXPECT_TRUE(ReadAll("pf") == value);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("pf"), "vram");
  EXPECT_TRUE(ReadDevice("pf") == value);
}

TEST_F(GpuBackendTest, OpenForWritePrefersVramAndReturnsADeviceIpcRegion) {
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB, 8 * kMiB, 64 * kMiB));
  const std::string value = Pattern(5 * kMiB + 3, 70);
  auto plan = backend_->OpenForWrite("plan", value.size(), {});
  ASSERT_TRUE(plan) << ToString(plan.error());
  EXPECT_EQ(plan->target.tier, 0u);
  EXPECT_EQ(plan->target.tier_name, "vram");
  EXPECT_EQ(plan->target.location.size, value.size());
  EXPECT_EQ(plan->target.location.offset % GpuTier::kAlignment, 0u);
  EXPECT_EQ(plan->region.kind, SharedRegion::Kind::kDeviceIpc);
  EXPECT_EQ(plan->region.ipc_handle.size(), 64u);  // sizeof(hipIpcMemHandle_t)
  EXPECT_EQ(plan->region.device_index, device_);
  EXPECT_EQ(plan->region.size, 16 * kMiB);
  auto exported = gpu_->ExportRegion();
  ASSERT_TRUE(exported);
  EXPECT_EQ(plan->region.ipc_handle, exported->ipc_handle);
  // Producers refuse regions of another machine: the id must be this one's.
  EXPECT_FALSE(plan->region.machine_id.empty());
  EXPECT_EQ(plan->region.machine_id, MachineId());
  EXPECT_TRUE(plan->region.path.empty());
  EXPECT_EQ(plan->timeout, BackendOptions{}.put_start_discard_timeout);

  // The producer places the bytes in device memory (here through the tier;
  // a producer process maps the IPC handle), invisible until the commit.
  ASSERT_TRUE(gpu_->Write(plan->target.location, 0, Bytes(value)));
  EXPECT_EQ(backend_->Get("plan", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(backend_->Locate("plan").error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_FALSE(directory_.Owns("plan"));
  ASSERT_TRUE(backend_->CommitDirect(plan->epoch, "plan"));
  EXPECT_TRUE(directory_.Owns("plan"));
  EXPECT_EQ(TierOf("plan"), "vram");
  EXPECT_TRUE(ReadAll("plan") == value);
  EXPECT_EQ(backend_->CommitDirect(plan->epoch, "plan").error(), ErrorCode::kIllegalClient);

  // A plan may still ask for DRAM: a host-file region then.
  auto host = backend_->OpenForWrite("host-plan", 4096, {.preferred_tier = 1});
  ASSERT_TRUE(host);
  EXPECT_EQ(host->target.tier_name, "dram");
  EXPECT_EQ(host->region.kind, SharedRegion::Kind::kHostFile);
  EXPECT_TRUE(host->region.ipc_handle.empty());
  ASSERT_TRUE(backend_->PutRevoke(host->epoch));
  // Never SSD, which no other process can map.
  EXPECT_EQ(backend_->OpenForWrite("ssd-plan", 4096, {.preferred_tier = 2}).error(),
            ErrorCode::kTierNotFound);
}

TEST_F(GpuBackendTest, APlanLargerThanVramFallsBackToDram) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB, 32 * kMiB, 64 * kMiB));
  auto spill = backend_->OpenForWrite("spill", 5 * kMiB, {});
  ASSERT_TRUE(spill) << ToString(spill.error());
  EXPECT_EQ(spill->target.tier_name, "dram");
  EXPECT_EQ(spill->region.kind, SharedRegion::Kind::kHostFile);
  ASSERT_TRUE(backend_->PutRevoke(spill->epoch));
  EXPECT_EQ(Tier(1).used, 0u);
}

TEST_F(GpuBackendTest, LocateOfAVramObjectReturnsTheDeviceRegionAndHoldsIt) {
  BackendOptions options = DefaultOptions();
  options.kv_lease_ttl = Millis(60000);
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB, 8 * kMiB, 64 * kMiB, options));
  const std::string value = Pattern(2 * kMiB + 9, 80);
  ASSERT_TRUE(backend_->Put("loc", value, {}));
  auto info = backend_->Inspect("loc");
  ASSERT_TRUE(info);
  auto placement = backend_->Locate("loc");
  ASSERT_TRUE(placement) << ToString(placement.error());
  EXPECT_EQ(placement->where.tier, 0u);
  EXPECT_EQ(placement->where.tier_name, "vram");
  EXPECT_EQ(placement->where.location.offset, info->offset);
  EXPECT_EQ(placement->where.location.size, value.size());
  EXPECT_EQ(placement->size, value.size());
  EXPECT_EQ(placement->version, info->version);
  EXPECT_EQ(placement->hold, Millis(60000));
  ASSERT_TRUE(placement->region.has_value());
  EXPECT_EQ(placement->region->kind, SharedRegion::Kind::kDeviceIpc);
  EXPECT_EQ(placement->region->ipc_handle.size(), 64u);
  EXPECT_EQ(placement->region->ipc_handle, gpu_->ExportRegion()->ipc_handle);
  EXPECT_EQ(placement->region->device_index, device_);
  EXPECT_EQ(placement->region->size, 8 * kMiB);
  // The placement names the object's bytes in device memory.
  std::string seen(value.size(), '\0');
  ASSERT_TRUE(gpu_->Read(placement->where.location, 0,
                         std::as_writable_bytes(std::span(seen.data(), seen.size()))));
  EXPECT_TRUE(seen == value);

  // Held: an operator's evict does not move it from under the reader...
  EXPECT_EQ(backend_->EvictTier("vram", 0.0).value(), 0u);
  EXPECT_EQ(TierOf("loc"), "vram");
  // ...while an object nobody located (or read) still moves: the control.
  ASSERT_TRUE(backend_->Put("free", Pattern(kMiB, 81), {}));
  EXPECT_GT(backend_->EvictTier("vram", 0.0).value(), 0u);
  EXPECT_EQ(TierOf("free"), "dram");
  EXPECT_EQ(TierOf("loc"), "vram");

  // DRAM placements are host files; SSD ones have no region.
  auto in_dram = backend_->Locate("free");
  ASSERT_TRUE(in_dram);
  ASSERT_TRUE(in_dram->region.has_value());
  EXPECT_EQ(in_dram->region->kind, SharedRegion::Kind::kHostFile);
  ASSERT_TRUE(backend_->Put("cold", "x", {.preferred_tier = 2}));
  auto in_ssd = backend_->Locate("cold");
  ASSERT_TRUE(in_ssd);
  EXPECT_EQ(in_ssd->where.tier_name, "ssd");
  EXPECT_FALSE(in_ssd->region.has_value());
}

// ---------------------------------------------------------------------------
// Runs everywhere: the worker's own tier set-up (WorkerServer::Start ->
// OpenTiers), in this process, with a VRAM capacity configured.

class WorkerServerTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mooncake-worker-tiers-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A worker whose master is unreachable: it serves (and retries
  // registering in the background), which is all these tests need.
  WorkerConfig Config(int gpu_device = 0) {
    WorkerConfig c;
    c.node_id = "vram-probe";
    c.port = 0;
    c.admin_port = -1;
    c.master = "127.0.0.1:" + std::to_string(UnusedPort());
    c.dram_capacity = 16 * kMiB;
    c.ssd_capacity = 32 * kMiB;
    c.ssd_path = dir_ + "/ssd";
    c.vram_capacity = 64 * kMiB;
    c.gpu_device = gpu_device;
    c.log_level = "warn";
    return c;
  }

  static std::vector<std::string> TierNames(TieredCacheBackend& backend) {
    std::vector<std::string> names;
    for (const TierSnapshot& tier : backend.Stats().tiers) names.push_back(tier.name);
    return names;
  }

  std::string dir_;
  std::unique_ptr<WorkerServer> server_;
};

TEST_F(WorkerServerTiersTest, AVramCapacityWithoutADeviceLeavesDramAndSsd) {
  const std::string probe = GpuTier::ProbeReason();
  std::cout << "[   INFO   ] GpuTier probe: " << probe << "\n";
  auto started = WorkerServer::Start(Config());
  ASSERT_TRUE(started) << "WorkerServer::Start: " << ToString(started.error());
  server_ = std::move(*started);
  TieredCacheBackend& backend = server_->backend();
  const std::vector<std::string> names = TierNames(backend);

  if (!HaveDevice()) {
    if (EnvFlag("MOONCAKE_REQUIRE_GPU")) {
      FAIL() << "MOONCAKE_REQUIRE_GPU is set but no GPU is usable: " << probe;
    }
    // No device: the worker runs with DRAM + SSD and says nothing about VRAM.
    EXPECT_EQ(names, (std::vector<std::string>{"dram", "ssd"}));
    EXPECT_EQ(backend.TierIndex("vram"), -1);
    EXPECT_EQ(backend.Stats().tiers.at(0).kind, TierKind::kDram);
    // Writes land in DRAM (a whole Put would also claim the key at the
    // master, which this test does not run), and a plan goes to the DRAM
    // arena as a host file.
    auto write = backend.PutStart("k", 5, {});
    ASSERT_TRUE(write) << ToString(write.error());
    EXPECT_EQ(backend.Inspect("k")->tier, "dram");
    ASSERT_TRUE(backend.PutRevoke(*write));
    auto plan = backend.OpenForWrite("plan", 4096, {});
    ASSERT_TRUE(plan) << ToString(plan.error());
    EXPECT_EQ(plan->target.tier_name, "dram");
    EXPECT_EQ(plan->region.kind, SharedRegion::Kind::kHostFile);
    EXPECT_TRUE(plan->region.ipc_handle.empty());
    ASSERT_TRUE(backend.PutRevoke(plan->epoch));
    return;
  }
  // A device: the VRAM tier comes first, with the configured capacity.
  EXPECT_EQ(names, (std::vector<std::string>{"vram", "dram", "ssd"}));
  EXPECT_EQ(backend.Stats().tiers.at(0).kind, TierKind::kVram);
  EXPECT_EQ(backend.Stats().tiers.at(0).capacity, 64 * kMiB);
  auto write = backend.PutStart("k", 5, {});
  ASSERT_TRUE(write) << ToString(write.error());
  EXPECT_EQ(backend.Inspect("k")->tier, "vram");
  ASSERT_TRUE(backend.PutRevoke(*write));
  auto plan = backend.OpenForWrite("plan", 4096, {});
  ASSERT_TRUE(plan) << ToString(plan.error());
  EXPECT_EQ(plan->target.tier_name, "vram");
  EXPECT_EQ(plan->region.kind, SharedRegion::Kind::kDeviceIpc);
  ASSERT_TRUE(backend.PutRevoke(plan->epoch));
}

TEST_F(WorkerServerTiersTest, ABadGpuDeviceIndexIsAnErrorOnlyWhereDevicesExist) {
  if (!HaveDevice() && EnvFlag("MOONCAKE_REQUIRE_GPU")) {
    ADD_FAILURE() << "MOONCAKE_REQUIRE_GPU is set but no GPU is usable: " << GpuTier::ProbeReason();
  }
  auto started = WorkerServer::Start(Config(/*gpu_device=*/1000));
  if (!HaveDevice()) {
    // Nothing to select from: same as no device, the worker runs without VRAM.
    ASSERT_TRUE(started) << "WorkerServer::Start: " << ToString(started.error());
    server_ = std::move(*started);
    EXPECT_EQ(TierNames(server_->backend()), (std::vector<std::string>{"dram", "ssd"}));
    return;
  }
  // A configuration error on a GPU machine stops the worker rather than
  // silently dropping the tier the operator asked for.
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error(), ErrorCode::kInvalidParams);
}

}  // namespace
}  // namespace mooncake
