// RDMA selection and its TCP fallback over real processes: workers started
// with --rdma auto on a machine without an RDMA device (the usual CI host)
// move objects between nodes byte for byte over TCP; --rdma on refuses to
// start, naming why; --rdma off works; and the RDMA calls of the worker
// service (RdmaConnect, AdoptEnd with written_directly) answer cleanly when
// the worker has no RDMA.
//
// On a host with an RDMA device the auto workers use RDMA instead: the moves
// must still be byte-exact, and the --rdma on refusal is skipped.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "mooncake_rpc/WorkerService.h"
#include "tests/integration/test_cluster.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
using WorkerRpc = RpcChannel<rpc::WorkerServiceClient>;

std::string Key(std::string_view prefix, int i) { return std::string(prefix) + std::to_string(i); }

PutOptions On(std::string node) {
  PutOptions o;
  o.preferred_node = std::move(node);
  return o;
}

// Whether this host could have an RDMA device at all (sysfs lists them).
bool HostListsRdmaDevices() {
  std::error_code ec;
  const std::filesystem::path dir = "/sys/class/infiniband";
  return std::filesystem::is_directory(dir, ec) &&
         std::filesystem::directory_iterator(dir, ec) != std::filesystem::directory_iterator();
}

WorkerOptions Sized(uint64_t dram_mib, uint64_t ssd_mib, std::vector<std::string> extra) {
  WorkerOptions o{.dram = dram_mib * kMiB, .ssd = ssd_mib * kMiB};
  o.extra_args = {"--adopt-confirm-delay-ms", "500"};
  o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
  return o;
}

class RdmaFallbackTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(40);
  }

  // The whole log of a process (the harness keeps one per process).
  std::string LogOf(const std::string& name) {
    std::ifstream in(cluster_.dir() / (name + ".log"), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  WorkerCounters StatsOf(Client& client, const std::string& node) {
    auto stats = client.Stats(node);
    EXPECT_TRUE(IsOk(stats)) << "Stats(" << node << ")";
    return stats ? *stats : WorkerCounters{};
  }

  std::unique_ptr<WorkerRpc> RawWorker(const std::string& node) {
    return std::make_unique<WorkerRpc>("127.0.0.1", cluster_.worker_port(node));
  }

  // Fills w1 (8 MiB DRAM + 16 MiB SSD) past its last tier with objects of
  // `sizes`, so the oldest must move to w2; checks every object byte for byte
  // and that the two nodes agree on the moves. Returns the keys that moved.
  std::set<std::string> FillW1AndCheckMoves(const std::vector<uint64_t>& sizes);

  TestCluster cluster_;
};

std::set<std::string> RdmaFallbackTest::FillW1AndCheckMoves(const std::vector<uint64_t>& sizes) {
  auto client = cluster_.NewClient("w1");
  if (!client) return {};
  std::map<std::string, std::string> values;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = Key("move-", static_cast<int>(i));
    values[key] = PatternBytes(900 + i, sizes[i]);
    EXPECT_TRUE(IsOk(client->Put(key, values[key], On("w1")))) << key;
  }
  std::set<std::string> moved;
  for (const auto& [key, value] : values) {
    auto info = client->Inspect(key);
    EXPECT_TRUE(IsOk(info)) << key << " lost";
    if (info && info->node_id != "w1") moved.insert(key);
  }
  EXPECT_FALSE(moved.empty()) << "nothing left w1: the test did not force inter-node eviction";
  EXPECT_TRUE(moved.contains("move-0")) << "the least recently used object stayed on w1";
  WorkerCounters w1, w2;
  EXPECT_TRUE(Eventually(
      [&] {
        w1 = StatsOf(*client, "w1");
        w2 = StatsOf(*client, "w2");
        return w1.moved_out > 0 && w1.moved_out == w2.moved_in;
      },
      5s))
      << "w1 moved_out=" << w1.moved_out << " w2 moved_in=" << w2.moved_in;
  EXPECT_EQ(w1.dropped + w2.dropped, 0) << "objects were dropped with room left on w2";
  for (const auto& [key, value] : values) EXPECT_TRUE(ReadsBack(*client, key, value)) << key;
  return moved;
}

// ---------------------------------------------------------------------------

TEST_F(RdmaFallbackTest, AutoWorkersWithoutADeviceMoveObjectsByteExactOverTcp) {
  // Given two workers with --rdma auto; w1 has a small SSD, w2 room to spare.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", Sized(8, 16, {"--rdma", "auto"})));
  ASSERT_TRUE(cluster_.StartWorker("w2", Sized(64, 128, {"--rdma", "auto"})));
  const bool rdma_here = LogOf("w1").find("rdma enabled") != std::string::npos;
  if (!rdma_here) {
    EXPECT_NE(LogOf("w1").find("rdma disabled (--rdma auto)"), std::string::npos)
        << "auto without a device must say why it uses TCP";
  }

  // When w1 is filled past its SSD with 1 MiB objects and a few larger than
  // one RPC chunk (4 MiB).
  std::vector<uint64_t> sizes(24, kMiB);
  sizes.insert(sizes.begin() + 3, 6 * kMiB);
  sizes.insert(sizes.begin() + 10, 5 * kMiB + 123);
  std::set<std::string> moved = FillW1AndCheckMoves(sizes);
  std::cout << moved.size() << " of " << sizes.size() << " objects moved to w2 over "
            << (rdma_here ? "rdma" : "tcp") << "\n";

  // Expect the transport named once in w1's log.
  const std::string log = LogOf("w1");
  if (rdma_here) {
    EXPECT_NE(log.find("peer transfer transport node=w2 transport=rdma"), std::string::npos);
  } else {
    EXPECT_NE(log.find("peer transfer transport node=w2 transport=tcp"), std::string::npos);
    EXPECT_EQ(log.find("transport=rdma"), std::string::npos);
    EXPECT_EQ(LogOf("w2").find("rdma accepted"), std::string::npos);
  }
}

TEST_F(RdmaFallbackTest, RdmaOffWorkerServesAndMovesOverTcp) {
  // Given w1 with --rdma off and w2 with --rdma auto.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", Sized(8, 16, {"--rdma", "off"})));
  ASSERT_TRUE(cluster_.StartWorker("w2", Sized(64, 128, {"--rdma", "auto"})));
  EXPECT_NE(LogOf("w1").find("rdma off"), std::string::npos);

  // Expect puts, gets and inter-node moves to work.
  std::vector<uint64_t> sizes(28, kMiB);
  std::set<std::string> moved = FillW1AndCheckMoves(sizes);
  EXPECT_FALSE(moved.empty());
  const std::string log = LogOf("w1");
  EXPECT_NE(log.find("peer transfer transport node=w2 transport=tcp reason=\"RDMA is off"),
            std::string::npos);
}

TEST_F(RdmaFallbackTest, RdmaOnWithoutADeviceExitsNonZeroNamingTheReason) {
  ASSERT_TRUE(cluster_.StartMaster());
  WorkerOptions options = Sized(8, 16, {"--rdma", "on"});
  auto started = cluster_.StartWorker("w-on", options);
  if (started) {
    GTEST_SKIP() << "an RDMA device is present: --rdma on started";
  }
  const std::string failure = started.message();
  EXPECT_NE(failure.find("exited with code 1"), std::string::npos) << failure;
  EXPECT_FALSE(cluster_.IsRunning("w-on"));
  const std::string log = LogOf("w-on");
  EXPECT_NE(log.find("cannot start: --rdma on but RDMA is unusable"), std::string::npos) << log;
  EXPECT_NE(log.find("TIER_NOT_FOUND"), std::string::npos) << log;
  const auto reason_at = log.find("reason=\"");
  ASSERT_NE(reason_at, std::string::npos) << log;
  EXPECT_NE(log[reason_at + 8], '"') << "empty reason: " << log;
  if (!HostListsRdmaDevices()) {
    EXPECT_NE(log.find("no RDMA device"), std::string::npos) << log;
  }

  // The same flags with --rdma off start fine.
  options.extra_args.back() = "off";
  EXPECT_TRUE(cluster_.StartWorker("w-off", options));
}

TEST_F(RdmaFallbackTest, RdmaCallsOnAWorkerWithoutRdmaAnswerCleanly) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", Sized(16, 32, {"--rdma", "auto"})));
  ASSERT_TRUE(cluster_.StartWorker("w2", Sized(16, 32, {"--rdma", "off"})));
  if (LogOf("w1").find("rdma enabled") != std::string::npos) {
    GTEST_SKIP() << "an RDMA device is present: w1 has RDMA";
  }
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);

  for (const std::string node : {"w1", "w2"}) {
    SCOPED_TRACE(node);
    auto raw = RawWorker(node);
    // RdmaConnect: TIER_NOT_FOUND with a reason, well-formed endpoint or not.
    rpc::RdmaEndpoint endpoint;
    endpoint.lid = 1;
    endpoint.qp_num = 77;
    endpoint.psn = 5;
    endpoint.mtu = 3;
    for (bool malformed : {false, true}) {
      if (malformed) endpoint.gid = "bad";
      rpc::RdmaConnectResult connected;
      ASSERT_TRUE(IsOk(raw->Call(
          [&](rpc::WorkerServiceClient& w) { w.RdmaConnect(connected, "probe", endpoint); })));
      EXPECT_EQ(connected.code, rpc::ErrorCode::TIER_NOT_FOUND);
      EXPECT_FALSE(connected.reason.empty());
      EXPECT_TRUE(connected.regions.empty());
    }

    // AdoptEnd(handle, written_directly=true): refused, the write stays pending.
    const std::string key = "adopt-on-" + node;
    const std::string value = PatternBytes(42, 256 * 1024);
    rpc::PutStartResult start;
    ASSERT_TRUE(IsOk(raw->Call([&](rpc::WorkerServiceClient& w) {
      w.AdoptStart(start, key, static_cast<int64_t>(value.size()), rpc::ReplicateConfig(), 3, "");
    })));
    ASSERT_EQ(start.code, rpc::ErrorCode::OK);
    auto direct =
        raw->Call([&](rpc::WorkerServiceClient& w) { return w.AdoptEnd(start.handle, true); });
    ASSERT_TRUE(IsOk(direct));
    EXPECT_EQ(*direct, rpc::ErrorCode::INVALID_PARAMS);
    rpc::ObjectInfo info;
    ASSERT_TRUE(IsOk(raw->Call([&](rpc::WorkerServiceClient& w) { w.Inspect(info, key); })));
    EXPECT_EQ(info.code, rpc::ErrorCode::OK);
    EXPECT_EQ(info.state, "writing") << "AdoptEnd(true) without RDMA committed the write";
    rpc::GetResult early;
    ASSERT_TRUE(IsOk(raw->Call([&](rpc::WorkerServiceClient& w) { w.Get(early, key, 0, 0); })));
    EXPECT_EQ(early.code, rpc::ErrorCode::REPLICA_IS_NOT_READY);
    auto exists = client->Exist(key);
    ASSERT_TRUE(IsOk(exists));
    EXPECT_FALSE(*exists);

    // The same handle still completes over TCP, and the adopted copy can go.
    auto chunk =
        raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutChunk(start.handle, 0, value); });
    ASSERT_TRUE(IsOk(chunk));
    EXPECT_EQ(*chunk, rpc::ErrorCode::OK);
    auto ended =
        raw->Call([&](rpc::WorkerServiceClient& w) { return w.AdoptEnd(start.handle, false); });
    ASSERT_TRUE(IsOk(ended));
    EXPECT_EQ(*ended, rpc::ErrorCode::OK);
    auto aborted = raw->Call([&](rpc::WorkerServiceClient& w) { return w.AdoptAbort(key); });
    ASSERT_TRUE(IsOk(aborted));
    EXPECT_EQ(*aborted, rpc::ErrorCode::OK);
  }
}

}  // namespace
}  // namespace mooncake::testing
