// Client reads of large objects by RDMA READ, over real master and worker
// processes (ClientConfig.rdma, client/rdma_reads.h):
//
//   - a client with rdma=auto on a machine without an RDMA device reads
//     5 MiB, 9 MiB and 64 MiB objects byte for byte over TCP, and its
//     transport counters say RDMA is disabled and why
//   - rdma=on without a device fails Client::Create with TIER_NOT_FOUND;
//     an unknown mode with INVALID_PARAMS
//
// On a machine with an RDMA device the device tests run instead (they skip,
// with the reason, elsewhere; MOONCAKE_REQUIRE_RDMA=1 turns the skips into
// failures): everything after an object's first chunk comes by RDMA, byte for
// byte; an upsert during the RDMA read is detected and the new value read
// over TCP; a worker with --rdma off is read over TCP with the fallback
// counted.

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/device_env.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
const std::vector<uint64_t> kLargeSizes = {5 * kMiB, 9 * kMiB, 64 * kMiB};

// Bytes after the first chunk: what an RDMA read of an object of `size` moves.
uint64_t RdmaPart(uint64_t size) { return size > kRpcChunkBytes ? size - kRpcChunkBytes : 0; }

// Device tests: skip with the reason, or fail when MOONCAKE_REQUIRE_RDMA is set.
#define SKIP_WITHOUT_RDMA(why_expr)                                                 \
  do {                                                                              \
    const std::string why_ = (why_expr);                                            \
    if (!why_.empty()) {                                                            \
      if (EnvFlag("MOONCAKE_REQUIRE_RDMA")) FAIL() << "RDMA is required: " << why_; \
      GTEST_SKIP() << why_;                                                         \
    }                                                                               \
  } while (0)

class ClientRdmaTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(40);
  }

  // Master and w1 (DRAM only, room for every object here) with `worker_rdma`.
  ::testing::AssertionResult StartCluster(const std::string& worker_rdma) {
    if (auto ok = cluster_.StartMaster(); !ok) return ok;
    WorkerOptions options{.dram = 256 * kMiB, .ssd = 0};
    options.extra_args = {"--rdma", worker_rdma};
    return cluster_.StartWorker("w1", options);
  }

  std::unique_ptr<Client> ClientWith(const std::string& rdma) {
    ClientConfig config = cluster_.ClientConfigFor("w1");
    config.rdma = rdma;
    return cluster_.NewClient(config);
  }

  std::string LogOf(const std::string& name) {
    std::ifstream in(cluster_.dir() / (name + ".log"), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Empty when both the client and w1 use RDMA; otherwise why not.
  std::string WhyNoRdma(const Client& client) {
    const TransportCounters t = client.transport_counters();
    if (!t.rdma_enabled) return "no RDMA device for the client: " + t.rdma_reason;
    if (LogOf("w1").find("rdma enabled") == std::string::npos) return "w1 did not enable RDMA";
    return "";
  }

  // Puts `size` pattern bytes of `seed` under `key`; returns the value.
  std::string PutPattern(Client& client, const std::string& key, uint64_t seed, uint64_t size) {
    std::string value = PatternBytes(seed, size);
    EXPECT_TRUE(IsOk(client.Put(key, value))) << key;
    return value;
  }

  TestCluster cluster_;
};

std::string KeyFor(uint64_t size) { return "large-" + std::to_string(size); }

// ---- No device (this machine) ----

TEST_F(ClientRdmaTest, AutoClientWithoutADeviceReadsLargeObjectsByteExactOverTcp) {
  // Given a worker with --rdma auto and a client with rdma=auto.
  ASSERT_TRUE(StartCluster("auto"));
  auto client = ClientWith("auto");
  ASSERT_TRUE(client);
  const TransportCounters before = client->transport_counters();
  if (before.rdma_enabled) {
    GTEST_SKIP() << "an RDMA device is present (" << before.rdma_reason
                 << "): the device tests cover this host";
  }
  EXPECT_FALSE(before.rdma_reason.empty()) << "auto without a device must say why it uses TCP";
  std::cout << "[   INFO   ] client rdma=auto: " << before.rdma_reason << "\n";

  // When objects of one, two and sixteen chunks are put and read back by
  // Get, GetStream and BatchGet.
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (uint64_t size : kLargeSizes) {
    keys.push_back(KeyFor(size));
    values.push_back(PutPattern(*client, keys.back(), size, size));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(ReadsBack(*client, keys[i], values[i])) << keys[i];
    PatternCheckBuf check(kLargeSizes[i]);
    std::ostream out(&check);
    auto streamed = client->GetStream(keys[i], out);
    ASSERT_TRUE(IsOk(streamed)) << keys[i];
    EXPECT_EQ(*streamed, kLargeSizes[i]);
    EXPECT_EQ(check.bytes(), kLargeSizes[i]);
    EXPECT_EQ(check.mismatches(), 0u)
        << keys[i] << " first bad byte at " << check.first_mismatch().value_or(0);
  }
  auto batch = client->BatchGet(keys);
  ASSERT_EQ(batch.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(IsOk(batch[i])) << keys[i];
    EXPECT_TRUE(batch[i]->data == values[i]) << keys[i];
  }

  // Expect every byte over TCP, with RDMA never tried.
  const TransportCounters after = client->transport_counters();
  EXPECT_FALSE(after.rdma_enabled);
  EXPECT_EQ(after.rdma_reason, before.rdma_reason);
  EXPECT_EQ(after.rdma_gets, 0u);
  EXPECT_EQ(after.rdma_bytes, 0u);
  EXPECT_EQ(after.rdma_fallbacks, 0u) << "a disabled link costs no attempt";
}

TEST_F(ClientRdmaTest, OffClientSaysSoAndReadsOverTcp) {
  ASSERT_TRUE(StartCluster("auto"));
  auto client = ClientWith("off");
  ASSERT_TRUE(client);
  const std::string value = PutPattern(*client, "k9", 9, 9 * kMiB);
  EXPECT_TRUE(ReadsBack(*client, "k9", value));
  const TransportCounters t = client->transport_counters();
  EXPECT_FALSE(t.rdma_enabled);
  EXPECT_NE(t.rdma_reason.find("off"), std::string::npos) << t.rdma_reason;
  EXPECT_EQ(t.rdma_gets + t.rdma_bytes + t.rdma_fallbacks, 0u);
}

TEST_F(ClientRdmaTest, OnWithoutADeviceFailsCreateWithTierNotFound) {
  ASSERT_TRUE(StartCluster("auto"));
  ClientConfig config = cluster_.ClientConfigFor("w1");
  config.rdma = "on";
  auto client = Client::Create(config);
  if (client) {
    GTEST_SKIP() << "an RDMA device is present: " << (*client)->transport_counters().rdma_reason;
  }
  EXPECT_TRUE(FailsWith(client, ErrorCode::kTierNotFound));

  config.rdma = "bogus";
  EXPECT_TRUE(FailsWith(Client::Create(config), ErrorCode::kInvalidParams));
}

// ---- Needs a device ----

TEST_F(ClientRdmaTest, DeviceReadsEverythingAfterTheFirstChunkByRdmaByteExact) {
  ASSERT_TRUE(StartCluster("auto"));
  auto client = ClientWith("auto");
  ASSERT_TRUE(client);
  SKIP_WITHOUT_RDMA(WhyNoRdma(*client));

  // A single-chunk object stays on TCP: no attempt, no extra RPC.
  const std::string small = PutPattern(*client, "small", 1, 3 * kMiB);
  EXPECT_TRUE(ReadsBack(*client, "small", small));
  EXPECT_EQ(client->transport_counters().rdma_gets, 0u);
  EXPECT_EQ(client->transport_counters().rdma_fallbacks, 0u);

  uint64_t gets = 0;
  uint64_t bytes = 0;
  for (uint64_t size : kLargeSizes) {
    SCOPED_TRACE(KeyFor(size));
    const std::string value = PutPattern(*client, KeyFor(size), size, size);
    EXPECT_TRUE(ReadsBack(*client, KeyFor(size), value));
    PatternCheckBuf check(size);
    std::ostream out(&check);
    ASSERT_TRUE(IsOk(client->GetStream(KeyFor(size), out)));
    EXPECT_EQ(check.bytes(), size);
    EXPECT_EQ(check.mismatches(), 0u);
    gets += 2;
    bytes += 2 * RdmaPart(size);
    const TransportCounters t = client->transport_counters();
    EXPECT_EQ(t.rdma_gets, gets);
    EXPECT_EQ(t.rdma_bytes, bytes);
    EXPECT_EQ(t.rdma_fallbacks, 0u);
  }
  EXPECT_NE(LogOf("w1").find("rdma accepted"), std::string::npos);
}

TEST_F(ClientRdmaTest, DeviceDetectsAnUpsertDuringTheRdmaReadAndReadsTheNewValue) {
  ASSERT_TRUE(StartCluster("auto"));
  auto client = ClientWith("auto");
  ASSERT_TRUE(client);
  SKIP_WITHOUT_RDMA(WhyNoRdma(*client));
  auto writer = ClientWith("off");
  ASSERT_TRUE(writer);

  // Given a 9 MiB object (one TCP chunk, then 5 MiB by RDMA).
  const std::string key = "upserted";
  const std::string old_value = PutPattern(*client, key, 1, 9 * kMiB);
  const std::string new_value = PatternBytes(2, old_value.size());

  // When another client upserts it in place once the first RDMA chunk arrived.
  bool upserted = false;
  ProgressFn progress = [&](uint64_t done, uint64_t) {
    if (upserted || done <= kRpcChunkBytes) return;
    upserted = true;
    EXPECT_TRUE(IsOk(writer->Upsert(key, new_value)));
  };
  std::stringstream out;  // seekable: the read may start over
  auto got = client->GetStream(key, out, progress);

  // Expect the change caught after the RDMA read and the new value read whole.
  ASSERT_TRUE(IsOk(got));
  ASSERT_TRUE(upserted) << "the read never reached its RDMA part";
  EXPECT_TRUE(out.str() == new_value) << "the read mixed versions or kept the old one";
  const TransportCounters t = client->transport_counters();
  EXPECT_EQ(t.rdma_gets, 0u) << "the RDMA bytes were accepted despite the upsert";
  EXPECT_EQ(t.rdma_fallbacks, 1u);

  // And the next read of the unchanged object goes by RDMA again.
  EXPECT_TRUE(ReadsBack(*client, key, new_value));
  EXPECT_EQ(client->transport_counters().rdma_gets, 1u);
}

TEST_F(ClientRdmaTest, DeviceClientFallsBackToTcpWhenTheWorkerRefusesRdma) {
  ASSERT_TRUE(StartCluster("off"));
  auto client = ClientWith("auto");
  ASSERT_TRUE(client);
  const TransportCounters t0 = client->transport_counters();
  SKIP_WITHOUT_RDMA(t0.rdma_enabled ? "" : "no RDMA device for the client: " + t0.rdma_reason);

  for (uint64_t size : kLargeSizes) {
    const std::string value = PutPattern(*client, KeyFor(size), size, size);
    EXPECT_TRUE(ReadsBack(*client, KeyFor(size), value)) << KeyFor(size);
  }
  const TransportCounters t = client->transport_counters();
  EXPECT_EQ(t.rdma_gets, 0u);
  EXPECT_EQ(t.rdma_bytes, 0u);
  EXPECT_EQ(t.rdma_fallbacks, kLargeSizes.size()) << "each large read tried, then used TCP";
  EXPECT_EQ(LogOf("w1").find("rdma accepted"), std::string::npos);
}

}  // namespace
}  // namespace mooncake::testing
