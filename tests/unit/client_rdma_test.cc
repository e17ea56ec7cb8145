// The client's RDMA configuration (ClientConfig.rdma, rdma_device,
// rdma_min_bytes) and RdmaReads (client/rdma_reads.h) without a cluster:
// Client::Create checks them before it contacts the master, so a bad mode or
// a missing device is reported as such, whatever the master's state.
//
// The device-dependent cases skip, printing why, when an RDMA device is
// usable here; the reads themselves are covered by
// tests/integration/client_rdma_test.cc.

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "client/client.h"
#include "client/rdma_reads.h"

namespace mooncake {
namespace {

// A master address nothing answers on: Create gets as far as the master only
// when the RDMA configuration passed.
ClientConfig NoMaster(std::string rdma) {
  ClientConfig config;
  config.master_host = "127.0.0.1";
  config.master_port = 1;
  config.connect_timeout_ms = 200;
  config.rdma = std::move(rdma);
  return config;
}

TEST(ClientRdmaConfigTest, AnUnknownModeIsInvalidParams) {
  for (const char* bogus : {"bogus", "", "ON", "yes", "auto "}) {
    auto client = Client::Create(NoMaster(bogus));
    ASSERT_FALSE(client) << bogus;
    EXPECT_EQ(client.error(), ErrorCode::kInvalidParams) << "rdma=\"" << bogus << "\"";
  }
}

TEST(ClientRdmaConfigTest, OnWithoutADeviceIsTierNotFoundBeforeTheMasterIsAsked) {
  auto client = Client::Create(NoMaster("on"));
  ASSERT_FALSE(client) << "nothing listens on the master port";
  if (client.error() == ErrorCode::kRpcFail || client.error() == ErrorCode::kRpcTimeout) {
    GTEST_SKIP() << "an RDMA device is present: rdma=on got as far as the master";
  }
  EXPECT_EQ(client.error(), ErrorCode::kTierNotFound) << ToString(client.error());
}

TEST(ClientRdmaConfigTest, OffAndAutoNeverFailForWantOfADevice) {
  for (const char* mode : {"off", "auto"}) {
    auto client = Client::Create(NoMaster(mode));
    ASSERT_FALSE(client);
    EXPECT_TRUE(client.error() == ErrorCode::kRpcFail || client.error() == ErrorCode::kRpcTimeout)
        << mode << ": only the master is missing, yet " << ToString(client.error());
  }
}

TEST(ClientRdmaConfigTest, TheDefaultIsOffAndLargerThanOneChunk) {
  ClientConfig config;
  EXPECT_EQ(config.rdma, "off");
  EXPECT_TRUE(config.rdma_device.empty());
  EXPECT_EQ(config.rdma_min_bytes, kRpcChunkBytes + 1) << "single-chunk objects stay on TCP";
}

TEST(RdmaReadsTest, OffIsDisabledWithAReasonAndWantsNothing) {
  auto reads = RdmaReads::Open(NoMaster("off"));
  ASSERT_TRUE(reads);
  const TransportCounters counters = (*reads)->counters();
  EXPECT_FALSE(counters.rdma_enabled);
  EXPECT_NE(counters.rdma_reason.find("off"), std::string::npos) << counters.rdma_reason;
  EXPECT_EQ(counters.rdma_gets + counters.rdma_bytes + counters.rdma_fallbacks, 0u);
  EXPECT_FALSE((*reads)->Wants(1ull << 30));
}

TEST(RdmaReadsTest, AutoWithoutADeviceIsDisabledWithTheProbeReason) {
  auto reads = RdmaReads::Open(NoMaster("auto"));
  ASSERT_TRUE(reads);
  const TransportCounters counters = (*reads)->counters();
  if (counters.rdma_enabled) GTEST_SKIP() << "an RDMA device is present: " << counters.rdma_reason;
  EXPECT_FALSE(counters.rdma_reason.empty());
  EXPECT_FALSE((*reads)->Wants(1ull << 30)) << "a disabled link costs no RPC";
  std::cout << "[   INFO   ] client rdma=auto: " << counters.rdma_reason << "\n";
}

TEST(RdmaReadsTest, InitiatorNamesAreUniquePerClientAndNeverTheLocalNodeItself) {
  // Workers keep one queue pair per initiator name: a client named like its
  // co-located worker, or like another client, would replace theirs.
  ClientConfig config = NoMaster("off");
  auto a = RdmaReads::Open(config);
  auto b = RdmaReads::Open(config);
  ASSERT_TRUE(a && b);
  EXPECT_NE((*a)->node_id(), (*b)->node_id());
  EXPECT_TRUE((*a)->node_id().starts_with("client-")) << (*a)->node_id();
  config.local_node = "w1";
  auto local = RdmaReads::Open(config);
  ASSERT_TRUE(local);
  EXPECT_NE((*local)->node_id(), "w1");
  EXPECT_TRUE((*local)->node_id().starts_with("client-w1-")) << (*local)->node_id();
}

TEST(RdmaReadsTest, WantsOnlyObjectsOfAtLeastMinBytesOnAnEnabledLink) {
  ClientConfig config = NoMaster("auto");
  config.rdma_min_bytes = 8ull << 20;
  auto reads = RdmaReads::Open(config);
  ASSERT_TRUE(reads);
  if (!(*reads)->counters().rdma_enabled) {
    GTEST_SKIP() << "no RDMA device: " << (*reads)->counters().rdma_reason;
  }
  EXPECT_FALSE((*reads)->Wants((8ull << 20) - 1));
  EXPECT_TRUE((*reads)->Wants(8ull << 20));
}

}  // namespace
}  // namespace mooncake
