#include "tiers/gpu_tier.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/device_env.h"

// Tests of the VRAM tier. Those that need a device skip, printing why, when
// no HIP device answers (a build without HIP, no driver, no GPU). On a GPU
// machine where a skip would hide a broken set-up, set MOONCAKE_REQUIRE_GPU=1
// to turn those skips into failures. MOONCAKE_GPU_DEVICE picks the device
// (default 0).

namespace mooncake {
namespace {

using mooncake::testing::EnvFlag;
using mooncake::testing::HaveDevice;
using mooncake::testing::TestDeviceIndex;

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t word = rng();
    std::memcpy(out.data() + i, &word, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<std::byte>(rng());
  return out;
}

// Runs everywhere: with no device, Create must fail with kTierNotFound and a
// reason (never crash, never hand out a fake tier); with a device, the
// argument checks must reject bad input.
TEST(GpuTierTest, CreateFailsCleanlyWithoutADeviceAndRejectsBadArguments) {
  const std::string probe = GpuTier::ProbeReason();
  std::cout << "[   INFO   ] GpuTier probe: " << probe << "\n";
  RecordProperty("gpu_probe", probe);
  EXPECT_FALSE(probe.empty());

  std::string why;
  auto zero = GpuTier::Create("vram", 0, 0, &why);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), ErrorCode::kInvalidParams);
  EXPECT_FALSE(why.empty());

  auto count = GpuTier::DeviceCount();
  if (!count || *count == 0) {
    if (!GpuTier::BuiltWithHip()) {
      EXPECT_FALSE(count);
      EXPECT_TRUE(probe.starts_with("built without HIP")) << probe;
    }
    why.clear();
    auto tier = GpuTier::Create("vram", 1 * MiB, 0, &why);
    ASSERT_FALSE(tier);
    EXPECT_EQ(tier.error(), ErrorCode::kTierNotFound);
    EXPECT_FALSE(why.empty());
    std::cout << "[   INFO   ] GpuTier::Create without a device: " << why << "\n";
    return;
  }

  ASSERT_TRUE(GpuTier::BuiltWithHip());
  for (int bad : {*count, *count + 1, -1, INT_MAX, INT_MIN}) {
    why.clear();
    auto tier = GpuTier::Create("vram", 1 * MiB, bad, &why);
    ASSERT_FALSE(tier) << "device index " << bad;
    EXPECT_EQ(tier.error(), ErrorCode::kInvalidParams) << "device index " << bad;
    EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  }
}

class GpuTierDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOONCAKE_SKIP_WITHOUT_GPU();
    device_ = TestDeviceIndex();
  }

  std::unique_ptr<GpuTier> MakeTier(uint64_t capacity) {
    std::string why;
    auto tier = GpuTier::Create("vram0", capacity, device_, &why);
    EXPECT_TRUE(tier.has_value()) << why;
    return tier ? std::move(*tier) : nullptr;
  }

  int device_ = 0;
};

TEST_F(GpuTierDeviceTest, IdentityAndUsedAccounting) {
  auto tier = MakeTier(16 * MiB);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->name(), "vram0");
  EXPECT_EQ(tier->kind(), TierKind::kVram);
  EXPECT_EQ(ToString(tier->kind()), "vram");
  EXPECT_EQ(tier->capacity(), 16 * MiB);
  EXPECT_EQ(tier->arena_size(), 16 * MiB);
  EXPECT_EQ(tier->device_index(), device_);
  EXPECT_NE(tier->device_base(), nullptr);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_EQ(tier->object_count(), 0u);

  auto zero = tier->Allocate(0);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), ErrorCode::kInvalidParams);

  auto a = tier->Allocate(1000);  // rounded to kAlignment
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size, 1000u);
  EXPECT_EQ(a->offset % GpuTier::kAlignment, 0u);
  EXPECT_EQ(tier->used(), 1024u);
  EXPECT_EQ(tier->object_count(), 1u);
  auto b = tier->Allocate(1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->offset % GpuTier::kAlignment, 0u);
  EXPECT_EQ(tier->used(), 1024u + GpuTier::kAlignment);
  EXPECT_EQ(tier->object_count(), 2u);
  auto c = tier->Allocate(3 * MiB);
  ASSERT_TRUE(c);
  EXPECT_EQ(tier->used(), 1024u + GpuTier::kAlignment + 3 * MiB);

  tier->Free(*b);
  EXPECT_EQ(tier->used(), 1024u + 3 * MiB);
  EXPECT_EQ(tier->object_count(), 2u);
  tier->Free(*a);
  tier->Free(*c);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_EQ(tier->object_count(), 0u);
}

TEST_F(GpuTierDeviceTest, RoundTripIsByteExactAtVariousOffsets) {
  auto tier = MakeTier(256 * MiB);
  ASSERT_TRUE(tier);
  // Offsets straddle the staging halves (kStagingBytes / 2) on purpose.
  const uint64_t half = GpuTier::kStagingBytes / 2;
  const std::vector<uint64_t> offsets = {0, 1, 4093, half - 7, half + 3, 3 * half + 1};
  const uint64_t max_offset = 3 * half + 1;
  uint64_t seed = 1;
  for (uint64_t size : {64 * KiB, 1 * MiB, 5 * MiB + 17, 64 * MiB}) {
    auto loc = tier->Allocate(size + max_offset);
    ASSERT_TRUE(loc) << "size " << size;
    for (uint64_t offset : offsets) {
      SCOPED_TRACE(::testing::Message() << "size " << size << " offset " << offset);
      const auto data = RandomBytes(size, seed++);
      ASSERT_TRUE(tier->Write(*loc, offset, data));
      std::vector<std::byte> out(size);
      ASSERT_TRUE(tier->Read(*loc, offset, out));
      ASSERT_TRUE(out == data);
      // A sub-range read that starts and ends inside the object.
      const uint64_t skip = size / 3 + 5;
      std::vector<std::byte> part(size / 2);
      ASSERT_TRUE(tier->Read(*loc, offset + skip, part));
      ASSERT_EQ(0, std::memcmp(part.data(), data.data() + skip, part.size()));
    }
    tier->Free(*loc);
  }
  EXPECT_EQ(tier->used(), 0u);
}

TEST_F(GpuTierDeviceTest, PiecewiseWritesAndNeighboursDoNotOverlap) {
  auto tier = MakeTier(32 * MiB);
  ASSERT_TRUE(tier);
  std::vector<TierLocation> locs;
  std::vector<std::vector<std::byte>> datas;
  for (uint64_t size : {3 * MiB + 1, 100 * KiB, uint64_t{7}, 6 * MiB + 255}) {
    auto loc = tier->Allocate(size);
    ASSERT_TRUE(loc);
    locs.push_back(*loc);
    datas.push_back(RandomBytes(size, size));
  }
  for (size_t i = 0; i < locs.size(); ++i) {
    // Uneven pieces, last one first, to exercise offsets inside a location.
    const std::span<const std::byte> all(datas[i]);
    const uint64_t cut = all.size() / 3;
    ASSERT_TRUE(tier->Write(locs[i], cut, all.subspan(cut)));
    ASSERT_TRUE(tier->Write(locs[i], 0, all.first(cut)));
  }
  for (size_t i = 0; i < locs.size(); ++i) {
    std::vector<std::byte> out(locs[i].size);
    ASSERT_TRUE(tier->Read(locs[i], 0, out));
    EXPECT_TRUE(out == datas[i]) << "object " << i;
  }
}

TEST_F(GpuTierDeviceTest, CapacityExhaustionAndReuse) {
  auto tier = MakeTier(4 * MiB);
  ASSERT_TRUE(tier);
  std::vector<TierLocation> locs;
  for (int i = 0; i < 4; ++i) {
    auto loc = tier->Allocate(1 * MiB);
    ASSERT_TRUE(loc) << i;
    locs.push_back(*loc);
  }
  EXPECT_EQ(tier->used(), 4 * MiB);
  EXPECT_EQ(tier->object_count(), 4u);
  auto full = tier->Allocate(1);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error(), ErrorCode::kNoAvailableHandle);
  auto too_big = tier->Allocate(5 * MiB);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error(), ErrorCode::kNoAvailableHandle);

  tier->Free(locs[2]);
  EXPECT_EQ(tier->used(), 3 * MiB);
  auto again = tier->Allocate(1 * MiB);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->offset, locs[2].offset);
  // The reused space holds new bytes correctly.
  const auto data = RandomBytes(1 * MiB, 42);
  ASSERT_TRUE(tier->Write(*again, 0, data));
  std::vector<std::byte> out(1 * MiB);
  ASSERT_TRUE(tier->Read(*again, 0, out));
  EXPECT_TRUE(out == data);
}

TEST_F(GpuTierDeviceTest, OutOfBoundsAccessIsRejected) {
  auto tier = MakeTier(1 * MiB);
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(1000);
  ASSERT_TRUE(loc);
  std::vector<std::byte> buf(1001);
  EXPECT_EQ(tier->Write(*loc, 0, buf).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, 0, buf).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Write(*loc, 1, std::span(buf).first(1000)).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, UINT64_MAX, std::span(buf).first(2)).error(),
            ErrorCode::kInvalidParams);
  const TierLocation outside{.offset = 1 * MiB - 10, .size = 100};
  EXPECT_EQ(tier->Read(outside, 0, std::span(buf).first(1)).error(), ErrorCode::kInvalidParams);
  const TierLocation wrap{.offset = UINT64_MAX - 5, .size = 10};
  EXPECT_EQ(tier->Write(wrap, 0, std::span(buf).first(1)).error(), ErrorCode::kInvalidParams);
  // Empty transfers at the end of a location are fine.
  EXPECT_TRUE(tier->Write(*loc, 1000, {}));
  EXPECT_TRUE(tier->Read(*loc, 1000, {}));
}

TEST_F(GpuTierDeviceTest, ArenaLargerThanTheDeviceFailsCleanly) {
  std::string why;
  auto huge = GpuTier::Create("huge", 1ull << 60, device_, &why);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error(), ErrorCode::kInternalError);
  EXPECT_NE(why.find("hipMalloc"), std::string::npos) << why;
  // The failure is not sticky: the device still serves a normal tier.
  auto tier = MakeTier(1 * MiB);
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(4 * KiB);
  ASSERT_TRUE(loc);
  const auto data = RandomBytes(4 * KiB, 9);
  ASSERT_TRUE(tier->Write(*loc, 0, data));
  std::vector<std::byte> out(4 * KiB);
  ASSERT_TRUE(tier->Read(*loc, 0, out));
  EXPECT_TRUE(out == data);
}

TEST_F(GpuTierDeviceTest, ConcurrentTransfersOnDisjointLocations) {
  auto tier = MakeTier(64 * MiB);
  ASSERT_TRUE(tier);
  constexpr int kThreads = 4;
  std::vector<TierLocation> locs;
  for (int i = 0; i < kThreads; ++i) {
    auto loc = tier->Allocate(3 * MiB + 123);
    ASSERT_TRUE(loc);
    locs.push_back(*loc);
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        const auto data = RandomBytes(locs[t].size, 1000 * t + round);
        std::vector<std::byte> out(locs[t].size);
        if (!tier->Write(locs[t], 0, data) || !tier->Read(locs[t], 0, out) || out != data) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// Host memory as the DRAM arena is: page-aligned, so neighbouring ranges
// share no page. Declared before the tier that registers it, so it outlives
// the tier (the tier unregisters it when destroyed).
class PageAlignedBytes {
 public:
  explicit PageAlignedBytes(uint64_t size)
      : size_(size), data_(static_cast<std::byte*>(std::aligned_alloc(4096, size))) {
    std::memset(data_, 0, size_);
  }
  ~PageAlignedBytes() { std::free(data_); }
  PageAlignedBytes(const PageAlignedBytes&) = delete;
  PageAlignedBytes& operator=(const PageAlignedBytes&) = delete;
  std::byte* data() { return data_; }

 private:
  uint64_t size_;
  std::byte* data_;
};

// Registered host memory (the DRAM arena under --dram-pin-for-vram) moves
// by DMA with no staging; a span reaching past the range still stages.
TEST_F(GpuTierDeviceTest, ARegisteredHostRangeMovesByDmaByteExactBothWays) {
  constexpr uint64_t kRange = 24 * MiB;
  PageAlignedBytes host(kRange + 4 * MiB);  // the tail stays unregistered
  auto tier = MakeTier(64 * MiB);           // after `host`: goes first
  ASSERT_TRUE(tier);
  std::string why;
  ASSERT_TRUE(tier->RegisterHostRange(std::span(host.data(), kRange), &why)) << why;
  auto loc = tier->Allocate(20 * MiB);
  ASSERT_TRUE(loc);

  uint64_t seed = 90;
  for (uint64_t size : {4 * KiB + 3, 1 * MiB, 5 * MiB + 17}) {
    for (uint64_t at : {uint64_t{0}, uint64_t{4093}, kRange - size}) {
      SCOPED_TRACE(::testing::Message() << "size " << size << " host offset " << at);
      const auto data = RandomBytes(size, seed++);
      std::memcpy(host.data() + at, data.data(), size);
      const uint64_t direct = tier->direct_transfers();
      ASSERT_TRUE(tier->Write(*loc, 7, std::span<const std::byte>(host.data() + at, size)));
      std::memset(host.data() + at, 0, size);
      ASSERT_TRUE(tier->Read(*loc, 7, std::span(host.data() + at, size)));
      EXPECT_EQ(tier->direct_transfers(), direct + 2);
      ASSERT_EQ(0, std::memcmp(host.data() + at, data.data(), size));
    }
  }

  // Half in the range, half past its end: staged, and still exact.
  const uint64_t size = 2 * MiB;
  const uint64_t at = kRange - MiB;
  const auto data = RandomBytes(size, seed++);
  std::memcpy(host.data() + at, data.data(), size);
  const uint64_t staged = tier->staged_transfers();
  ASSERT_TRUE(tier->Write(*loc, 0, std::span<const std::byte>(host.data() + at, size)));
  std::vector<std::byte> out(size);
  ASSERT_TRUE(tier->Read(*loc, 0, out));
  EXPECT_EQ(tier->staged_transfers(), staged + 2);
  EXPECT_TRUE(out == data);
  tier->Free(*loc);
}

TEST_F(GpuTierDeviceTest, RegisteringAnEmptyOrOverlappingHostRangeIsRefused) {
  PageAlignedBytes host(8 * MiB);
  auto tier = MakeTier(4 * MiB);
  ASSERT_TRUE(tier);
  std::string why;
  EXPECT_EQ(tier->RegisterHostRange({}, &why).error(), ErrorCode::kInvalidParams);
  ASSERT_TRUE(tier->RegisterHostRange(std::span(host.data(), 4 * MiB), &why)) << why;
  why.clear();
  auto overlap = tier->RegisterHostRange(std::span(host.data() + 2 * MiB, 4 * MiB), &why);
  ASSERT_FALSE(overlap);
  EXPECT_EQ(overlap.error(), ErrorCode::kInvalidParams);
  EXPECT_NE(why.find("overlaps"), std::string::npos) << why;
  // The neighbouring range is fine.
  EXPECT_TRUE(tier->RegisterHostRange(std::span(host.data() + 4 * MiB, 4 * MiB), &why)) << why;
}

// ReadLent: one DMA into a pinned buffer of the tier's, lent until the
// returned LentBytes goes.
TEST_F(GpuTierDeviceTest, ReadLentLendsAPinnedBufferHoldingTheBytesUntilItIsDropped) {
  auto tier = MakeTier(16 * MiB);
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(6 * MiB);
  ASSERT_TRUE(loc);
  const auto data = RandomBytes(6 * MiB, 77);
  ASSERT_TRUE(tier->Write(*loc, 0, data));

  // A range inside the object, by DMA.
  const uint64_t direct = tier->direct_transfers();
  {
    auto lent = tier->ReadLent(*loc, 12345, 3 * MiB + 1);
    ASSERT_TRUE(lent) << ToString(lent.error());
    EXPECT_EQ(tier->direct_transfers(), direct + 1);
    std::span<const std::byte> bytes = (*lent)->bytes();
    ASSERT_EQ(bytes.size(), 3 * MiB + 1);
    EXPECT_EQ(0, std::memcmp(bytes.data(), data.data() + 12345, bytes.size()));
  }

  // More than a buffer holds: read with Read instead; out of bounds: refused.
  EXPECT_EQ(tier->ReadLent(*loc, 0, GpuTier::kStagingBytes + 1).error(),
            ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(tier->ReadLent(*loc, 6 * MiB - 10, 11).error(), ErrorCode::kInvalidParams);

  // Every buffer lent at once, each with its own bytes; one more is refused
  // until one is dropped.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    std::vector<std::unique_ptr<LentBytes>> held;
    for (int i = 0; i < GpuTier::kReadBuffers; ++i) {
      auto lent = tier->ReadLent(*loc, i * 4096, 4096);
      ASSERT_TRUE(lent) << i;
      held.push_back(std::move(*lent));
    }
    for (int i = 0; i < GpuTier::kReadBuffers; ++i) {
      EXPECT_EQ(0, std::memcmp(held[i]->bytes().data(), data.data() + i * 4096, 4096)) << i;
    }
    EXPECT_EQ(tier->ReadLent(*loc, 0, 4096).error(), ErrorCode::kNoAvailableHandle);
    held.pop_back();
    auto again = tier->ReadLent(*loc, 5, 4096);
    ASSERT_TRUE(again);
    EXPECT_EQ(0, std::memcmp((*again)->bytes().data(), data.data() + 5, 4096));
  }
  tier->Free(*loc);
}

}  // namespace
}  // namespace mooncake
