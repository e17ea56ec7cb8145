// RdmaLink (transport/rdma_link.h), its wire forms (worker/peer_transfer.h) and
// the worker handler's RDMA calls (RdmaConnect, AdoptEnd written_directly).
//
// Tests that need an RDMA device skip, printing why, when none is usable
// (this kernel has none, and soft-RoCE cannot be loaded). On an RDMA machine
// set MOONCAKE_REQUIRE_RDMA=1 to turn those skips into failures;
// MOONCAKE_RDMA_DEVICE picks the device (default: the first one).

#include "transport/rdma_link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "mooncake_rpc/WorkerService.h"
#include "tests/device_env.h"
#include "tests/unit/in_memory_directory.h"
#include "thrift/rdma_wire.h"
#include "tiers/dram_tier.h"
#include "worker/peer_transfer.h"
#include "worker/tiered_cache_backend.h"
#include "worker/worker_handler.h"

namespace mooncake {
namespace {

using mooncake::testing::EnvFlag;
using mooncake::testing::InMemoryDirectory;

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

std::string TestDeviceName() {
  const char* value = std::getenv("MOONCAKE_RDMA_DEVICE");
  return value != nullptr ? std::string(value) : std::string();
}

RdmaLinkOptions Options(RdmaMode mode) {
  RdmaLinkOptions options;
  options.mode = mode;
  options.device = TestDeviceName();
  return options;
}

std::string Pattern(uint64_t seed, uint64_t size) {
  std::mt19937_64 rng(seed);
  std::string out(size, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// A reader over `bytes`, as the backend hands one to PeerTransfer.
RdmaReader ReaderOf(const std::string& bytes) {
  return [&bytes](uint64_t offset, std::span<std::byte> out) -> Result<void> {
    if (offset > bytes.size() || out.size() > bytes.size() - offset) {
      return Err(ErrorCode::kInvalidParams);
    }
    std::memcpy(out.data(), bytes.data() + offset, out.size());
    return {};
  };
}

// ---- Modes and options ----

TEST(RdmaLinkTest, ModesParseAndPrint) {
  for (RdmaMode mode : {RdmaMode::kOff, RdmaMode::kAuto, RdmaMode::kOn}) {
    auto parsed = ParseRdmaMode(ToString(mode));
    ASSERT_TRUE(parsed) << ToString(mode);
    EXPECT_EQ(*parsed, mode);
  }
  for (const char* bad : {"", "yes", "ON", "true", "auto "}) {
    EXPECT_FALSE(ParseRdmaMode(bad)) << bad;
  }
}

TEST(RdmaLinkTest, OffIsDisabledWithAReason) {
  auto link = RdmaLink::Open(Options(RdmaMode::kOff));
  ASSERT_TRUE(link);
  EXPECT_FALSE((*link)->enabled());
  EXPECT_EQ((*link)->mode(), RdmaMode::kOff);
  EXPECT_NE((*link)->reason().find("off"), std::string::npos) << (*link)->reason();
  EXPECT_FALSE((*link)->stats().enabled);
}

TEST(RdmaLinkTest, AutoWithoutADeviceIsDisabledWithTheReason) {
  std::string why;
  auto link = RdmaLink::Open(Options(RdmaMode::kAuto), &why);
  ASSERT_TRUE(link) << "auto never fails for want of a device: " << why;
  if ((*link)->enabled()) {
    GTEST_SKIP() << "an RDMA device is present: " << (*link)->reason();
  }
  EXPECT_FALSE((*link)->reason().empty());
  EXPECT_EQ((*link)->reason(), why);
  EXPECT_EQ((*link)->reason().find('\n'), std::string::npos);
  std::cout << "[   INFO   ] --rdma auto: " << (*link)->reason() << "\n";
}

TEST(RdmaLinkTest, OnWithoutADeviceFailsWithTierNotFoundAndTheReason) {
  std::string why;
  auto link = RdmaLink::Open(Options(RdmaMode::kOn), &why);
  if (link) GTEST_SKIP() << "an RDMA device is present: " << (*link)->reason();
  EXPECT_EQ(link.error(), ErrorCode::kTierNotFound) << ToString(link.error());
  EXPECT_FALSE(why.empty());
  if (TestDeviceName().empty()) {
    EXPECT_TRUE(why.starts_with("no RDMA device")) << why;
  }
  std::cout << "[   INFO   ] --rdma on: " << why << "\n";
}

TEST(RdmaLinkTest, OptionsOutOfRangeAreRejectedInEveryMode) {
  for (RdmaMode mode : {RdmaMode::kOff, RdmaMode::kAuto, RdmaMode::kOn}) {
    SCOPED_TRACE(std::string(ToString(mode)));
    auto check = [mode](auto mutate, const char* word) {
      RdmaLinkOptions options = Options(mode);
      mutate(options);
      std::string why;
      auto link = RdmaLink::Open(options, &why);
      ASSERT_FALSE(link);
      EXPECT_EQ(link.error(), ErrorCode::kInvalidParams);
      EXPECT_NE(why.find(word), std::string::npos) << why;
    };
    check([](RdmaLinkOptions& o) { o.port = 0; }, "port");
    check([](RdmaLinkOptions& o) { o.port = 256; }, "port");
    check([](RdmaLinkOptions& o) { o.gid_index = -2; }, "gid");
    check([](RdmaLinkOptions& o) { o.bounce_buffers = 0; }, "bounce");
    check([](RdmaLinkOptions& o) { o.bounce_bytes = 100; }, "bounce");
    check([](RdmaLinkOptions& o) { o.max_passive_qps = 0; }, "queue pair");
  }
}

TEST(RdmaLinkTest, ADisabledLinkRefusesEverythingWithItsReason) {
  auto link = RdmaLink::Open(Options(RdmaMode::kOff));
  ASSERT_TRUE(link);
  RdmaLink& off = **link;

  std::string why;
  auto accepted = off.Accept("w2", RdmaEndpointInfo{.qp_num = 7, .mtu = 3}, &why);
  ASSERT_FALSE(accepted);
  EXPECT_EQ(accepted.error(), ErrorCode::kTierNotFound);
  EXPECT_EQ(why, off.reason());

  int connector_calls = 0;
  RdmaConnector connect = [&](const RdmaEndpointInfo&, std::string*) -> Result<RdmaPeerInfo> {
    ++connector_calls;
    return Err(ErrorCode::kInternalError);
  };
  const std::string value = "bytes";
  why.clear();
  auto written = off.WriteObject("w2", connect, "dram", 0, value.size(),
                                 RdmaSource{.addr = value.data(), .read = ReaderOf(value)}, &why);
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error(), ErrorCode::kTierNotFound);
  EXPECT_EQ(why, off.reason());
  EXPECT_EQ(connector_calls, 0) << "a disabled link never asks a peer";

  std::vector<std::byte> arena(4096);
  auto exported = off.ExportTier("dram", arena.data(), arena.size(), false);
  ASSERT_FALSE(exported);
  EXPECT_EQ(exported.error(), ErrorCode::kTierNotFound);
  EXPECT_TRUE(off.exports().empty());
  off.Forget("w2");  // harmless

  const RdmaLinkStats stats = off.stats();
  EXPECT_FALSE(stats.enabled);
  EXPECT_EQ(stats.accepts + stats.connects + stats.objects_written + stats.write_failures, 0u);
}

// A sink that appends what it is given to `out`, checking that the chunks
// arrive in order.
RdmaSink AppendTo(std::string& out, int* calls = nullptr) {
  return [&out, calls](uint64_t offset, std::span<const std::byte> bytes) -> Result<void> {
    if (calls != nullptr) ++*calls;
    if (offset != out.size()) return Err(ErrorCode::kInternalError);
    out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return {};
  };
}

TEST(RdmaLinkTest, ADisabledLinkReadsNothingAndNeverAsksAPeer) {
  for (RdmaMode mode : {RdmaMode::kOff, RdmaMode::kAuto}) {
    auto link = RdmaLink::Open(Options(mode));
    ASSERT_TRUE(link);
    if ((*link)->enabled()) continue;  // auto on a device machine: covered below
    SCOPED_TRACE(std::string(ToString(mode)));
    RdmaLink& off = **link;
    int connector_calls = 0;
    RdmaConnector connect = [&](const RdmaEndpointInfo&, std::string*) -> Result<RdmaPeerInfo> {
      ++connector_calls;
      return Err(ErrorCode::kInternalError);
    };
    std::string got;
    int sink_calls = 0;
    std::string why;
    auto read = off.ReadObject("w2", connect, "dram", 0, 4 * MiB, AppendTo(got, &sink_calls), &why);
    ASSERT_FALSE(read);
    EXPECT_EQ(read.error(), ErrorCode::kTierNotFound);
    EXPECT_EQ(why, off.reason());
    why.clear();
    auto connected = off.Connect("w2", connect, &why);
    ASSERT_FALSE(connected);
    EXPECT_EQ(connected.error(), ErrorCode::kTierNotFound);
    EXPECT_EQ(why, off.reason());
    EXPECT_EQ(connector_calls, 0) << "a disabled link never asks a peer";
    EXPECT_EQ(sink_calls, 0);
    const RdmaLinkStats stats = off.stats();
    EXPECT_EQ(stats.objects_read + stats.bytes_read + stats.read_failures, 0u);
    EXPECT_EQ(stats.connects + stats.connect_failures, 0u);
  }
}

// ---- Wire forms ----

TEST(RdmaWireTest, EndpointsRoundTripAndMalformedOnesAreRejected) {
  RdmaEndpointInfo info{.lid = 0x1234, .gid = {}, .qp_num = 0xabcdef, .psn = 0x123456, .mtu = 5};
  for (size_t i = 0; i < info.gid.size(); ++i) info.gid[i] = static_cast<uint8_t>(0xf0 + i);
  rpc::RdmaEndpoint wire = ToRpcEndpoint(info);
  EXPECT_EQ(wire.gid.size(), 16u);
  auto back = FromRpcEndpoint(wire);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->lid, info.lid);
  EXPECT_EQ(back->gid, info.gid);
  EXPECT_EQ(back->qp_num, info.qp_num);
  EXPECT_EQ(back->psn, info.psn);
  EXPECT_EQ(back->mtu, info.mtu);

  rpc::RdmaEndpoint lid_only = wire;
  lid_only.gid.clear();
  auto by_lid = FromRpcEndpoint(lid_only);
  ASSERT_TRUE(by_lid);
  EXPECT_EQ(by_lid->gid, (std::array<uint8_t, 16>{}));

  auto rejected = [&](auto mutate, const char* what) {
    rpc::RdmaEndpoint bad = wire;
    mutate(bad);
    auto parsed = FromRpcEndpoint(bad);
    ASSERT_FALSE(parsed) << what;
    EXPECT_EQ(parsed.error(), ErrorCode::kInvalidParams) << what;
  };
  rejected([](rpc::RdmaEndpoint& e) { e.gid = "short"; }, "gid of 5 bytes");
  rejected([](rpc::RdmaEndpoint& e) { e.gid.append("x"); }, "gid of 17 bytes");
  rejected([](rpc::RdmaEndpoint& e) { e.lid = -1; }, "negative lid");
  rejected([](rpc::RdmaEndpoint& e) { e.lid = 0x10000; }, "lid past 16 bits");
  rejected([](rpc::RdmaEndpoint& e) { e.qp_num = 0; }, "qp 0");
  rejected([](rpc::RdmaEndpoint& e) { e.qp_num = 0x1000000; }, "qp past 24 bits");
  rejected([](rpc::RdmaEndpoint& e) { e.psn = -1; }, "negative psn");
  rejected([](rpc::RdmaEndpoint& e) { e.mtu = 0; }, "mtu 0");
  rejected([](rpc::RdmaEndpoint& e) { e.mtu = 6; }, "mtu 6");
}

TEST(RdmaWireTest, ConnectResultsCarryRegionsAndRejectEmptyOnes) {
  rpc::RdmaConnectResult result;
  result.code = rpc::ErrorCode::OK;
  result.endpoint = ToRpcEndpoint(RdmaEndpointInfo{.lid = 3, .qp_num = 99, .psn = 1, .mtu = 3});
  RdmaExport dram{.tier = "dram",
                  .region = {.addr = 0x7f0000001000, .length = 64 * MiB, .rkey = 0xdeadbeef}};
  result.regions.push_back(ToRpcRegion(dram));
  auto info = FromRpcConnectResult(result);
  ASSERT_TRUE(info);
  ASSERT_EQ(info->regions.size(), 1u);
  EXPECT_EQ(info->regions[0].tier, "dram");
  EXPECT_EQ(info->regions[0].region.addr, dram.region.addr);
  EXPECT_EQ(info->regions[0].region.length, dram.region.length);
  EXPECT_EQ(info->regions[0].region.rkey, dram.region.rkey) << "rkeys above 2^31 survive i32";
  EXPECT_EQ(info->endpoint.qp_num, 99u);

  for (auto mutate : std::vector<std::function<void(rpc::RdmaRegion&)>>{
           [](rpc::RdmaRegion& r) { r.tier.clear(); }, [](rpc::RdmaRegion& r) { r.length = 0; },
           [](rpc::RdmaRegion& r) { r.addr = 0; }}) {
    rpc::RdmaConnectResult bad = result;
    mutate(bad.regions[0]);
    auto parsed = FromRpcConnectResult(bad);
    ASSERT_FALSE(parsed);
    EXPECT_EQ(parsed.error(), ErrorCode::kInvalidParams);
  }
}

// ---- The handler's RDMA calls ----

class WorkerHandlerRdmaTest : public ::testing::Test {
 protected:
  WorkerHandlerRdmaTest()
      : requests_(WorkerHandler::OperationNames()),
        backend_(MakeTiers(), &directory_, {}),
        handler_(backend_, "w1", requests_) {
    handler_.set_serving_reads(true);
  }

  static std::vector<std::unique_ptr<CacheTier>> MakeTiers() {
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 4 * MiB).value()));
    return tiers;
  }

  rpc::RdmaEndpoint SomeEndpoint() {
    return ToRpcEndpoint(RdmaEndpointInfo{.lid = 1, .qp_num = 42, .psn = 7, .mtu = 3});
  }

  InMemoryDirectory directory_;
  RequestMetrics requests_;
  TieredCacheBackend backend_;
  WorkerHandler handler_;
};

TEST_F(WorkerHandlerRdmaTest, RdmaConnectWithoutALinkAnswersTierNotFoundWithAReason) {
  rpc::RdmaConnectResult result;
  handler_.RdmaConnect(result, "w2", SomeEndpoint());
  EXPECT_EQ(result.code, rpc::ErrorCode::TIER_NOT_FOUND);
  EXPECT_FALSE(result.reason.empty());
  EXPECT_TRUE(result.regions.empty());
}

TEST_F(WorkerHandlerRdmaTest, RdmaConnectOnADisabledLinkGivesTheLinksReason) {
  auto link = RdmaLink::Open(Options(RdmaMode::kOff));
  ASSERT_TRUE(link);
  handler_.set_rdma_link(link->get());
  rpc::RdmaConnectResult result;
  handler_.RdmaConnect(result, "w2", SomeEndpoint());
  EXPECT_EQ(result.code, rpc::ErrorCode::TIER_NOT_FOUND);
  EXPECT_EQ(result.reason, (*link)->reason());
  handler_.set_rdma_link(nullptr);
}

TEST_F(WorkerHandlerRdmaTest, DirectAdoptEndWithoutRdmaIsRefusedAndLeavesTheWritePending) {
  auto link = RdmaLink::Open(Options(RdmaMode::kOff));
  ASSERT_TRUE(link);
  for (RdmaLink* rdma : {static_cast<RdmaLink*>(nullptr), link->get()}) {
    SCOPED_TRACE(rdma == nullptr ? "no link" : "disabled link");
    handler_.set_rdma_link(rdma);
    const std::string key = rdma == nullptr ? "adopt-a" : "adopt-b";
    const std::string value = Pattern(5, 100 * KiB);
    rpc::PutStartResult started;
    handler_.AdoptStart(started, key, static_cast<int64_t>(value.size()), {}, 9, "");
    ASSERT_EQ(started.code, rpc::ErrorCode::OK);
    EXPECT_EQ(started.tier, "dram");
    EXPECT_GE(started.tier_offset, 0);

    // When the sender claims it wrote the bytes itself.
    EXPECT_EQ(handler_.AdoptEnd(started.handle, true), rpc::ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(handler_.AdoptEnd(-1, true), rpc::ErrorCode::INVALID_PARAMS);

    // Expect nothing published: the write is still pending...
    rpc::ObjectInfo info;
    handler_.Inspect(info, key);
    ASSERT_EQ(info.code, rpc::ErrorCode::OK);
    EXPECT_EQ(info.state, "writing");
    rpc::GetResult early;
    handler_.Get(early, key, 0, 0);
    EXPECT_EQ(early.code, rpc::ErrorCode::REPLICA_IS_NOT_READY);
    // ...and the same handle still takes the bytes over TCP.
    ASSERT_EQ(handler_.PutChunk(started.handle, 0, value), rpc::ErrorCode::OK);
    ASSERT_EQ(handler_.AdoptEnd(started.handle, false), rpc::ErrorCode::OK);
    rpc::GetResult got;
    handler_.Get(got, key, 0, 0);
    ASSERT_EQ(got.code, rpc::ErrorCode::OK);
    EXPECT_TRUE(got.data == value);
    EXPECT_EQ(got.version, 9);
  }
  handler_.set_rdma_link(nullptr);
}

// ---- Needs a device ----

class RdmaLinkDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto target = RdmaLink::Open(Options(RdmaMode::kOn), &why);
    if (!target) {
      const std::string reason = why.starts_with("no RDMA device") ? why : "no RDMA device: " + why;
      if (EnvFlag("MOONCAKE_REQUIRE_RDMA")) {
        FAIL() << "MOONCAKE_REQUIRE_RDMA is set but RDMA is unusable: " << reason;
      }
      GTEST_SKIP() << reason;
    }
    target_ = std::move(*target);
    auto sender = RdmaLink::Open(Options(RdmaMode::kOn), &why);
    ASSERT_TRUE(sender) << why;
    sender_ = std::move(*sender);
    target_arena_.resize(32 * MiB);
    sender_arena_.resize(16 * MiB);
  }

  // The sender's connector: the target's Accept, called in-process.
  RdmaConnector ConnectToTarget(int* calls = nullptr) {
    return [this, calls](const RdmaEndpointInfo& local, std::string* why) {
      if (calls != nullptr) ++*calls;
      return target_->Accept("sender", local, why);
    };
  }

  // Declared first: destroyed after the links that registered them.
  std::vector<std::byte> target_arena_;
  std::vector<std::byte> sender_arena_;
  std::unique_ptr<RdmaLink> target_;
  std::unique_ptr<RdmaLink> sender_;
};

TEST_F(RdmaLinkDeviceTest, WritesObjectsIntoAnAcceptingLinksArenaByteExact) {
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), target_arena_.size(), false));
  EXPECT_EQ(target_->ExportTier("dram", target_arena_.data(), 4096, false).error(),
            ErrorCode::kInvalidParams);
  ASSERT_EQ(target_->exports().size(), 1u);

  int connects = 0;
  uint64_t offset = 5;
  // Through the bounce buffer: smaller than, equal to and larger than it.
  for (uint64_t size : {1 * KiB, 4 * MiB, 9 * MiB + 3}) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    const std::string value = Pattern(size, size);
    std::string why;
    auto written = sender_->WriteObject("target", ConnectToTarget(&connects), "dram", offset, size,
                                        RdmaSource{.addr = nullptr, .read = ReaderOf(value)}, &why);
    ASSERT_TRUE(written) << why;
    EXPECT_EQ(0, std::memcmp(target_arena_.data() + offset, value.data(), size));
    offset += size + 7;
  }
  EXPECT_EQ(connects, 1) << "one queue pair per peer, kept";

  // Directly from a registered source, without a bounce copy.
  ASSERT_TRUE(sender_->ExportTier("dram", sender_arena_.data(), sender_arena_.size(), false));
  const std::string value = Pattern(77, 3 * MiB);
  std::memcpy(sender_arena_.data() + 4096, value.data(), value.size());
  ASSERT_TRUE(sender_->WriteObject("target", ConnectToTarget(&connects), "dram", 20 * MiB,
                                   value.size(), RdmaSource{.addr = sender_arena_.data() + 4096}));
  EXPECT_EQ(0, std::memcmp(target_arena_.data() + 20 * MiB, value.data(), value.size()));

  const RdmaLinkStats sent = sender_->stats();
  EXPECT_EQ(sent.objects_written, 4u);
  EXPECT_EQ(sent.direct_writes, 1u);
  EXPECT_EQ(sent.connects, 1u);
  EXPECT_EQ(sent.active_qps, 1u);
  EXPECT_EQ(target_->stats().accepts, 1u);
  EXPECT_EQ(target_->stats().passive_qps, 1u);
}

TEST_F(RdmaLinkDeviceTest, UnexportedTiersAndRangesOutsideTheRegionWriteNothing) {
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), 1 * MiB, false));
  std::fill(target_arena_.begin(), target_arena_.end(), std::byte{0x5a});
  const std::string value = Pattern(3, 64 * KiB);
  auto source = RdmaSource{.addr = nullptr, .read = ReaderOf(value)};
  auto ssd = sender_->WriteObject("target", ConnectToTarget(), "ssd", 0, value.size(), source);
  ASSERT_FALSE(ssd);
  EXPECT_EQ(ssd.error(), ErrorCode::kTierNotFound);
  auto past = sender_->WriteObject("target", ConnectToTarget(), "dram", 1 * MiB - 100, value.size(),
                                   source);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error(), ErrorCode::kInvalidParams);
  EXPECT_TRUE(std::all_of(target_arena_.begin(), target_arena_.end(), [](std::byte b) {
    return b == std::byte{0x5a};
  })) << "a refused write changed the target's memory";
  // The queue pair is still good.
  EXPECT_TRUE(sender_->WriteObject("target", ConnectToTarget(), "dram", 0, value.size(), source));
}

TEST_F(RdmaLinkDeviceTest, ARefusingPeerIsRememberedUntilForgotten) {
  int calls = 0;
  RdmaConnector refuse = [&](const RdmaEndpointInfo&, std::string* why) -> Result<RdmaPeerInfo> {
    ++calls;
    *why = "peer has no RDMA";
    return Err(ErrorCode::kTierNotFound);
  };
  const std::string value = "x";
  auto source = RdmaSource{.addr = nullptr, .read = ReaderOf(value)};
  for (int i = 0; i < 3; ++i) {
    std::string why;
    auto written = sender_->WriteObject("tcp-only", refuse, "dram", 0, 1, source, &why);
    ASSERT_FALSE(written);
    EXPECT_EQ(written.error(), ErrorCode::kTierNotFound);
    EXPECT_NE(why.find("peer has no RDMA"), std::string::npos) << why;
  }
  EXPECT_EQ(calls, 1);
  sender_->Forget("tcp-only");
  EXPECT_FALSE(sender_->WriteObject("tcp-only", refuse, "dram", 0, 1, source));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sender_->stats().connect_failures, 2u);
}

TEST_F(RdmaLinkDeviceTest, AReconnectReplacesTheInitiatorsPassiveQueuePair) {
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), target_arena_.size(), false));
  const std::string value = Pattern(9, 8 * KiB);
  auto source = RdmaSource{.addr = nullptr, .read = ReaderOf(value)};
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(sender_->WriteObject("target", ConnectToTarget(), "dram", 0, value.size(), source));
    sender_->Forget("target");
  }
  EXPECT_EQ(target_->stats().accepts, 3u);
  EXPECT_EQ(target_->stats().passive_qps, 1u) << "one passive queue pair per initiator node";
}

TEST_F(RdmaLinkDeviceTest, ReadsAnExportedArenaByteExactChunkByChunk) {
  // Given a target whose arena holds a known pattern.
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), target_arena_.size(), false));
  const std::string arena = Pattern(21, target_arena_.size());
  std::memcpy(target_arena_.data(), arena.data(), arena.size());

  // When the sender reads ranges smaller than, equal to and larger than its
  // bounce buffer (4 MiB), at odd offsets.
  int connects = 0;
  uint64_t offset = 3;
  uint64_t bytes = 0;
  for (uint64_t size : {1 * KiB, 4 * MiB, 9 * MiB + 3}) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    std::string got;
    int chunks = 0;
    std::string why;
    ASSERT_TRUE(sender_->ReadObject("target", ConnectToTarget(&connects), "dram", offset, size,
                                    AppendTo(got, &chunks), &why))
        << why;
    // Expect every byte, in order, in bounce-buffer-sized chunks.
    ASSERT_EQ(got.size(), size);
    EXPECT_TRUE(got == arena.substr(offset, size));
    EXPECT_EQ(chunks, static_cast<int>((size + 4 * MiB - 1) / (4 * MiB)));
    offset += size + 11;
    bytes += size;
  }
  EXPECT_EQ(connects, 1) << "one queue pair per peer, kept";
  const RdmaLinkStats stats = sender_->stats();
  EXPECT_EQ(stats.objects_read, 3u);
  EXPECT_EQ(stats.bytes_read, bytes);
  EXPECT_EQ(stats.read_failures, 0u);
  EXPECT_EQ(stats.objects_written, 0u);
}

TEST_F(RdmaLinkDeviceTest, ReadsOfUnexportedTiersOrRangesOutsideTheRegionCallNoSink) {
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), 1 * MiB, false));
  std::string got;
  int chunks = 0;
  std::string why;
  auto ssd = sender_->ReadObject("target", ConnectToTarget(), "ssd", 0, 64 * KiB,
                                 AppendTo(got, &chunks), &why);
  ASSERT_FALSE(ssd);
  EXPECT_EQ(ssd.error(), ErrorCode::kTierNotFound);
  EXPECT_NE(why.find("ssd"), std::string::npos) << why;
  auto past = sender_->ReadObject("target", ConnectToTarget(), "dram", 1 * MiB - 100, 64 * KiB,
                                  AppendTo(got, &chunks), &why);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error(), ErrorCode::kInvalidParams);
  auto huge = sender_->ReadObject("target", ConnectToTarget(), "dram", 8, UINT64_MAX - 4,
                                  AppendTo(got, &chunks), &why);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error(), ErrorCode::kInvalidParams) << "overflow-safe range check";
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(sender_->stats().read_failures, 0u) << "refusals are not transfer failures";
  // The queue pair is still good.
  EXPECT_TRUE(sender_->ReadObject("target", ConnectToTarget(), "dram", 0, 64 * KiB,
                                  AppendTo(got, &chunks)));
  EXPECT_EQ(got.size(), 64 * KiB);
}

TEST_F(RdmaLinkDeviceTest, ASinkThatRefusesStopsTheReadAndKeepsTheQueuePair) {
  ASSERT_TRUE(target_->ExportTier("dram", target_arena_.data(), target_arena_.size(), false));
  int calls = 0;
  RdmaSink refuse_second = [&calls](uint64_t, std::span<const std::byte>) -> Result<void> {
    return ++calls == 2 ? Err(ErrorCode::kObjectReplicaBusy) : Result<void>{};
  };
  std::string why;
  auto read =
      sender_->ReadObject("target", ConnectToTarget(), "dram", 0, 12 * MiB, refuse_second, &why);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error(), ErrorCode::kTransferFail);
  EXPECT_NE(why.find("sink"), std::string::npos) << why;
  EXPECT_EQ(calls, 2) << "no chunk after the refused one";
  EXPECT_EQ(sender_->stats().read_failures, 1u);
  EXPECT_EQ(sender_->stats().active_qps, 1u) << "a sink failure does not break the queue pair";
  std::string got;
  EXPECT_TRUE(sender_->ReadObject("target", ConnectToTarget(), "dram", 0, 5 * MiB, AppendTo(got)));
  EXPECT_EQ(got.size(), 5 * MiB);
}

TEST_F(RdmaLinkDeviceTest, ConnectKeepsOneQueuePairAndRemembersARefusal) {
  int calls = 0;
  ASSERT_TRUE(sender_->Connect("target", ConnectToTarget(&calls)));
  ASSERT_TRUE(sender_->Connect("target", ConnectToTarget(&calls)));
  EXPECT_EQ(calls, 1);
  int refusals = 0;
  RdmaConnector refuse = [&](const RdmaEndpointInfo&, std::string* why) -> Result<RdmaPeerInfo> {
    ++refusals;
    *why = "peer has no RDMA";
    return Err(ErrorCode::kTierNotFound);
  };
  std::string why;
  for (int i = 0; i < 2; ++i) {
    auto connected = sender_->Connect("tcp-only", refuse, &why);
    ASSERT_FALSE(connected);
    EXPECT_EQ(connected.error(), ErrorCode::kTierNotFound);
    EXPECT_NE(why.find("peer has no RDMA"), std::string::npos) << why;
  }
  std::string got;
  EXPECT_EQ(sender_->ReadObject("tcp-only", refuse, "dram", 0, 1, AppendTo(got)).error(),
            ErrorCode::kTierNotFound);
  EXPECT_EQ(refusals, 1) << "the refusal is remembered for reads too";
}

TEST_F(RdmaLinkDeviceTest, AnRdmaWrittenAdoptIsPublishedByAdoptEnd) {
  // Given a target worker (backend + handler) whose DRAM arena its link exports.
  auto dram = DramTier::Create("dram", 16 * MiB);
  ASSERT_TRUE(dram);
  DramTier* arena = dram->get();
  ASSERT_TRUE(target_->ExportTier("dram", arena->arena_base(), arena->arena_size(), false));
  std::vector<std::unique_ptr<CacheTier>> tiers;
  tiers.push_back(std::move(*dram));
  InMemoryDirectory directory;
  RequestMetrics requests(WorkerHandler::OperationNames());
  TieredCacheBackend backend(std::move(tiers), &directory, {});
  WorkerHandler handler(backend, "target", requests);
  handler.set_rdma_link(target_.get());
  handler.set_serving_reads(true);

  // When a sender adopts into it over RdmaConnect + RDMA WRITE + AdoptEnd(true).
  const std::string value = Pattern(11, 5 * MiB + 17);
  rpc::PutStartResult started;
  handler.AdoptStart(started, "moved", static_cast<int64_t>(value.size()), {}, 4, "");
  ASSERT_EQ(started.code, rpc::ErrorCode::OK);
  ASSERT_EQ(started.tier, "dram");
  RdmaConnector connect = [&](const RdmaEndpointInfo& local, std::string* why) {
    rpc::RdmaConnectResult answer;
    handler.RdmaConnect(answer, "sender", ToRpcEndpoint(local));
    if (answer.code != rpc::ErrorCode::OK) {
      *why = answer.reason;
      return Result<RdmaPeerInfo>(Err(ErrorCode::kTierNotFound));
    }
    return FromRpcConnectResult(answer);
  };
  std::string why;
  ASSERT_TRUE(sender_->WriteObject("target", connect, started.tier,
                                   static_cast<uint64_t>(started.tier_offset), value.size(),
                                   RdmaSource{.addr = nullptr, .read = ReaderOf(value)}, &why))
      << why;
  ASSERT_EQ(handler.AdoptEnd(started.handle, true), rpc::ErrorCode::OK);

  // Expect the adopted object readable byte for byte, with its version.
  rpc::GetResult got;
  std::string read_back;
  while (read_back.size() < value.size()) {
    handler.Get(got, "moved", static_cast<int64_t>(read_back.size()), 0);
    ASSERT_EQ(got.code, rpc::ErrorCode::OK);
    ASSERT_FALSE(got.data.empty());
    read_back += got.data;
  }
  EXPECT_TRUE(read_back == value);
  EXPECT_EQ(got.version, 4);
  handler.set_rdma_link(nullptr);
  target_.reset();  // deregisters the arena before the backend unmaps it
}

}  // namespace
}  // namespace mooncake
