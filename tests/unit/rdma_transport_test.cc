#include "transport/rdma_transport.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tests/device_env.h"

// Tests of the RDMA transport. Those that need a device skip, printing why,
// when no RDMA device is usable (this kernel has none, and soft-RoCE cannot be
// loaded). On an RDMA machine where a skip would hide a broken set-up, set
// MOONCAKE_REQUIRE_RDMA=1 to turn those skips into failures.
// MOONCAKE_RDMA_DEVICE picks the device (default: the first one).

namespace mooncake {
namespace {

using mooncake::testing::EnvFlag;

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

std::string TestDeviceName() {
  const char* value = std::getenv("MOONCAKE_RDMA_DEVICE");
  return value != nullptr ? std::string(value) : std::string();
}

void FillRandom(std::byte* out, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t word = rng();
    std::memcpy(out + i, &word, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<std::byte>(rng());
}

// ---- Runs everywhere ----

TEST(RdmaContextTest, OpenFailsCleanlyWithoutADevice) {
  const std::string probe = RdmaContext::ProbeReason();
  std::cout << "[   INFO   ] RDMA probe: " << probe << "\n";
  RecordProperty("rdma_probe", probe);
  EXPECT_FALSE(probe.empty());

  std::string why;
  auto context = RdmaContext::Open(TestDeviceName(), 1, -1, &why);
  if (context) {
    std::cout << "[   INFO   ] RDMA device present: " << (*context)->device_name() << "\n";
    EXPECT_TRUE(why.empty());
    return;
  }
  EXPECT_EQ(context.error(), ErrorCode::kTierNotFound) << why;
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  if (probe.starts_with("no RDMA device")) {
    EXPECT_EQ(why, probe);
  }
  std::cout << "[   INFO   ] RdmaContext::Open without a device: " << why << "\n";

  // The same answer without a `why` to fill, and no crash.
  auto again = RdmaContext::Open();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), ErrorCode::kTierNotFound);
}

TEST(RdmaContextTest, OpeningAnAbsentNamedDeviceFails) {
  const std::string name = "mooncake_no_such_rdma_device0";
  std::string why;
  auto context = RdmaContext::Open(name, 1, -1, &why);
  ASSERT_FALSE(context);
  EXPECT_EQ(context.error(), ErrorCode::kTierNotFound);
  EXPECT_FALSE(why.empty());
  if (!why.starts_with("no RDMA device")) {
    EXPECT_NE(why.find(name), std::string::npos) << why;
  }
  std::cout << "[   INFO   ] RdmaContext::Open(\"" << name << "\"): " << why << "\n";
}

TEST(RdmaContextTest, ArgumentChecksNeedNoDevice) {
  for (int port : {0, -1, 256, INT_MAX, INT_MIN}) {
    std::string why;
    auto context = RdmaContext::Open("", port, -1, &why);
    ASSERT_FALSE(context) << "port " << port;
    EXPECT_EQ(context.error(), ErrorCode::kInvalidParams) << "port " << port;
    EXPECT_NE(why.find("port"), std::string::npos) << why;
  }
  for (int gid_index : {-2, INT_MIN}) {
    std::string why;
    auto context = RdmaContext::Open("", 1, gid_index, &why);
    ASSERT_FALSE(context) << "gid index " << gid_index;
    EXPECT_EQ(context.error(), ErrorCode::kInvalidParams) << "gid index " << gid_index;
    EXPECT_NE(why.find("gid"), std::string::npos) << why;
  }
  auto no_why = RdmaContext::Open("", 0, -1, nullptr);
  ASSERT_FALSE(no_why);
  EXPECT_EQ(no_why.error(), ErrorCode::kInvalidParams);
}

TEST(RdmaHelpersTest, RangeFitsIsOverflowSafe) {
  EXPECT_TRUE(RdmaRangeFits(100, 0, 100));
  EXPECT_TRUE(RdmaRangeFits(100, 100, 0));
  EXPECT_TRUE(RdmaRangeFits(100, 40, 60));
  EXPECT_TRUE(RdmaRangeFits(0, 0, 0));
  EXPECT_FALSE(RdmaRangeFits(100, 0, 101));
  EXPECT_FALSE(RdmaRangeFits(100, 41, 60));
  EXPECT_FALSE(RdmaRangeFits(100, 101, 0));
  EXPECT_FALSE(RdmaRangeFits(100, UINT64_MAX, 2));
  EXPECT_FALSE(RdmaRangeFits(100, 2, UINT64_MAX));
  EXPECT_FALSE(RdmaRangeFits(UINT64_MAX, UINT64_MAX - 1, 2));
  EXPECT_TRUE(RdmaRangeFits(UINT64_MAX, UINT64_MAX - 1, 1));
}

TEST(RdmaHelpersTest, GidClassificationAndFormatting) {
  std::array<uint8_t, 16> v4{};
  v4[10] = 0xff;
  v4[11] = 0xff;
  v4[12] = 192;
  v4[13] = 168;
  v4[14] = 1;
  v4[15] = 7;
  EXPECT_TRUE(IsIpv4MappedGid(v4));
  EXPECT_EQ(FormatGid(v4), "0000:0000:0000:0000:0000:ffff:c0a8:0107");

  std::array<uint8_t, 16> link_local{};
  link_local[0] = 0xfe;
  link_local[1] = 0x80;
  link_local[15] = 1;
  EXPECT_FALSE(IsIpv4MappedGid(link_local));
  EXPECT_EQ(FormatGid(link_local), "fe80:0000:0000:0000:0000:0000:0000:0001");
  EXPECT_FALSE(IsIpv4MappedGid(std::array<uint8_t, 16>{}));
}

TEST(RdmaMemoryRegionTest, DefaultRegionIsEmptyAndMovable) {
  RdmaMemoryRegion region;
  EXPECT_FALSE(region.valid());
  EXPECT_EQ(region.addr(), nullptr);
  EXPECT_EQ(region.length(), 0u);
  EXPECT_EQ(region.lkey(), 0u);
  EXPECT_EQ(region.rkey(), 0u);
  const RdmaRemoteRegion remote = region.remote();
  EXPECT_EQ(remote.addr, 0u);
  EXPECT_EQ(remote.length, 0u);
  RdmaMemoryRegion moved(std::move(region));
  EXPECT_FALSE(moved.valid());
  region = std::move(moved);
  EXPECT_FALSE(region.valid());
}

// ---- Needs a device ----

class RdmaDeviceTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBufferBytes = 64 * MiB;

  void SetUp() override {
    std::string why;
    auto context = RdmaContext::Open(TestDeviceName(), 1, -1, &why);
    if (!context) {
      const std::string reason = why.starts_with("no RDMA device") ? why : "no RDMA device: " + why;
      if (EnvFlag("MOONCAKE_REQUIRE_RDMA")) {
        FAIL() << "MOONCAKE_REQUIRE_RDMA is set but RDMA is unusable: " << reason;
      }
      GTEST_SKIP() << reason;
    }
    context_ = std::move(*context);
    buffer_.assign(kBufferBytes, std::byte{0});
    auto region = context_->Register(buffer_.data(), buffer_.size());
    ASSERT_TRUE(region) << ToString(region.error());
    region_ = std::move(*region);
  }

  RdmaLoopbackPair Pair() {
    auto pair = ConnectLoopbackPair(*context_);
    EXPECT_TRUE(pair) << (pair ? "" : ToString(pair.error()));
    return pair ? std::move(*pair) : RdmaLoopbackPair{};
  }

  std::byte* at(uint64_t offset) { return buffer_.data() + offset; }

  std::unique_ptr<RdmaContext> context_;
  std::vector<std::byte> buffer_;
  RdmaMemoryRegion region_;  // declared after buffer_: deregistered first
};

TEST_F(RdmaDeviceTest, RegistrationAndEndpointLookSane) {
  EXPECT_TRUE(region_.valid());
  EXPECT_EQ(region_.addr(), buffer_.data());
  EXPECT_EQ(region_.length(), kBufferBytes);
  EXPECT_FALSE(region_.device_memory());
  EXPECT_EQ(region_.remote().addr, reinterpret_cast<uint64_t>(buffer_.data()));
  EXPECT_EQ(region_.remote().rkey, region_.rkey());

  auto bad = context_->Register(nullptr, 4096);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), ErrorCode::kInvalidParams);
  auto empty = context_->Register(buffer_.data(), 0);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error(), ErrorCode::kInvalidParams);

  auto qp = RdmaQueuePair::Create(*context_);
  ASSERT_TRUE(qp);
  const RdmaEndpointInfo info = (*qp)->local();
  EXPECT_NE(info.qp_num, 0u);
  EXPECT_LE(info.psn, 0xffffffu);
  EXPECT_GE(info.mtu, 1);
  EXPECT_LE(info.mtu, 5);
  EXPECT_EQ(info.gid, context_->gid());
  EXPECT_GT((*qp)->send_queue_depth(), 0);
  std::cout << "[   INFO   ] device=" << context_->device_name() << " roce=" << context_->is_roce()
            << " lid=" << info.lid << " gid_index=" << context_->gid_index()
            << " gid=" << FormatGid(info.gid) << " mtu=" << info.mtu
            << " depth=" << (*qp)->send_queue_depth() << "\n";
}

TEST_F(RdmaDeviceTest, WriteThenReadRoundTripsByteExact) {
  RdmaLoopbackPair pair = Pair();
  ASSERT_TRUE(pair.first && pair.second);
  // Source, destination and read-back areas; odd offsets on purpose.
  const uint64_t src = 3, dst = 20 * MiB + 5, back = 40 * MiB + 1;
  uint64_t seed = 1;
  for (uint64_t size : {4 * KiB, 1 * MiB, 16 * MiB}) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    FillRandom(at(src), size, seed++);
    std::memset(at(dst), 0, size);
    std::memset(at(back), 0, size);
    ASSERT_TRUE(pair.first->Write(region_, src, region_.remote(), dst, size));
    ASSERT_EQ(0, std::memcmp(at(dst), at(src), size));
    ASSERT_TRUE(pair.first->Read(region_, back, region_.remote(), dst, size));
    ASSERT_EQ(0, std::memcmp(at(back), at(src), size));
  }
  // The other end works too, and an empty transfer is a no-op.
  FillRandom(at(src), 1 * MiB, seed++);
  ASSERT_TRUE(pair.second->Write(region_, src, region_.remote(), dst, 1 * MiB));
  EXPECT_EQ(0, std::memcmp(at(dst), at(src), 1 * MiB));
  EXPECT_TRUE(pair.first->Write(region_, 0, region_.remote(), 0, 0));
  EXPECT_TRUE(pair.first->Read(region_, kBufferBytes, region_.remote(), kBufferBytes, 0));
}

TEST_F(RdmaDeviceTest, OutOfBoundsIsRejectedAndWritesNothing) {
  RdmaLoopbackPair pair = Pair();
  ASSERT_TRUE(pair.first);
  FillRandom(buffer_.data(), kBufferBytes, 77);
  const std::vector<std::byte> before = buffer_;
  // A 1 MiB window at 32 MiB stands for a peer's object.
  RdmaRemoteRegion window = region_.remote();
  window.addr += 32 * MiB;
  window.length = 1 * MiB;
  RdmaQueuePair& qp = *pair.first;
  auto expect_rejected = [](const Result<void>& result, const char* what) {
    ASSERT_FALSE(result) << what;
    EXPECT_EQ(result.error(), ErrorCode::kInvalidParams) << what;
  };
  expect_rejected(qp.Write(region_, 0, window, 0, 1 * MiB + 1), "remote too long");
  expect_rejected(qp.Write(region_, 0, window, 1, 1 * MiB), "remote offset + length");
  expect_rejected(qp.Write(region_, 0, window, UINT64_MAX, 2), "remote offset wraps");
  expect_rejected(qp.Write(region_, UINT64_MAX, window, 0, 2), "local offset wraps");
  expect_rejected(qp.Write(region_, kBufferBytes - 10, window, 0, 11), "local past the end");
  expect_rejected(qp.Write(region_, 0, window, 0, UINT64_MAX), "length wraps");
  expect_rejected(qp.Read(region_, 0, window, 1 * MiB, 1), "read past remote");
  expect_rejected(qp.Read(region_, kBufferBytes, window, 0, 1), "read past local");
  const RdmaRemoteRegion wrapping{.addr = UINT64_MAX - 5, .length = 10, .rkey = window.rkey};
  expect_rejected(qp.Write(region_, 0, wrapping, 0, 1), "remote region wraps");
  expect_rejected(qp.Write(RdmaMemoryRegion{}, 0, window, 0, 0), "empty local region");
  EXPECT_TRUE(buffer_ == before) << "a rejected transfer changed memory";
  // Rejections leave the queue pair usable.
  ASSERT_TRUE(qp.Write(region_, 0, window, 0, 1 * MiB));
  EXPECT_EQ(0, std::memcmp(at(32 * MiB), at(0), 1 * MiB));
}

TEST_F(RdmaDeviceTest, UnconnectedAndMisconnectedQueuePairsAreRejected) {
  auto qp = RdmaQueuePair::Create(*context_);
  ASSERT_TRUE(qp);
  EXPECT_FALSE((*qp)->connected());
  auto unconnected = (*qp)->Write(region_, 0, region_.remote(), 1 * MiB, 4 * KiB);
  ASSERT_FALSE(unconnected);
  EXPECT_EQ(unconnected.error(), ErrorCode::kInvalidParams);

  auto peer = RdmaQueuePair::Create(*context_);
  ASSERT_TRUE(peer);
  RdmaEndpointInfo remote = (*peer)->local();
  for (int mtu : {0, 6, -1}) {
    RdmaEndpointInfo bad = remote;
    bad.mtu = mtu;
    EXPECT_EQ((*qp)->Connect(bad).error(), ErrorCode::kInvalidParams) << "mtu " << mtu;
  }
  RdmaEndpointInfo no_qp = remote;
  no_qp.qp_num = 0;
  EXPECT_EQ((*qp)->Connect(no_qp).error(), ErrorCode::kInvalidParams);
  // Malformed endpoints did not consume the queue pair.
  ASSERT_TRUE((*qp)->Connect(remote));
  ASSERT_TRUE((*peer)->Connect((*qp)->local()));
  EXPECT_TRUE((*qp)->connected());
  EXPECT_EQ((*qp)->Connect(remote).error(), ErrorCode::kInvalidParams);
  EXPECT_TRUE((*qp)->Write(region_, 0, region_.remote(), 1 * MiB, 4 * KiB));
}

TEST_F(RdmaDeviceTest, WrongRkeyFailsWithTransferFailAndBreaksTheQueuePair) {
  RdmaLoopbackPair pair = Pair();
  ASSERT_TRUE(pair.first);
  RdmaRemoteRegion wrong = region_.remote();
  wrong.rkey ^= 0x5a5a5a5a;
  auto failed = pair.first->Write(region_, 0, wrong, 1 * MiB, 64 * KiB, std::chrono::seconds(5));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error(), ErrorCode::kTransferFail);
  EXPECT_FALSE(pair.first->connected());
  auto after = pair.first->Write(region_, 0, region_.remote(), 1 * MiB, 4 * KiB);
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error(), ErrorCode::kTransferFail);
  // A fresh pair on the same context works.
  RdmaLoopbackPair fresh = Pair();
  ASSERT_TRUE(fresh.first);
  EXPECT_TRUE(fresh.first->Write(region_, 0, region_.remote(), 1 * MiB, 4 * KiB));
}

}  // namespace
}  // namespace mooncake
