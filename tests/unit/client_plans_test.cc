// The worker's plan and placement answers turned into WritePlan and
// ObjectPlacement (client/client_plans.h), without a worker: field mapping,
// the node fallback, and the contract checks that refuse a broken answer.
// Plans against a real backend are in plan_write_test.cc.

#include "client/client_plans.h"

#include <gtest/gtest.h>

#include <string>

namespace mooncake {
namespace {

rpc::MemoryHandle HostFile() {
  rpc::MemoryHandle handle;
  handle.kind = rpc::MemoryHandleKind::HOST_FILE;
  handle.path = "/proc/42/fd/7";
  handle.device_index = -1;
  handle.region_size = 1 << 20;
  handle.machine_id = "boot-1";
  return handle;
}

rpc::WritePlan PlanAnswer(uint64_t size) {
  rpc::WritePlan answer;
  answer.code = rpc::ErrorCode::OK;
  answer.node_id = "w2";
  answer.tier = "dram";
  answer.memory = HostFile();
  answer.offset = 4096;
  answer.size = static_cast<int64_t>(size);
  answer.epoch = 17;
  answer.timeout_ms = 30000;
  return answer;
}

TEST(ClientPlansTest, RegionHandleMapsEachKind) {
  rpc::MemoryHandle host = HostFile();
  MemoryRegionHandle region = ToRegionHandle(host);
  EXPECT_EQ(region.kind, MemoryRegionHandle::Kind::kHostFile);
  EXPECT_EQ(region.path, "/proc/42/fd/7");
  EXPECT_EQ(region.region_size, 1u << 20);
  EXPECT_EQ(region.machine_id, "boot-1");

  rpc::MemoryHandle device;
  device.kind = rpc::MemoryHandleKind::DEVICE_IPC;
  device.ipc_handle = std::string("\x01\x00\x02", 3);
  device.device_index = 1;
  region = ToRegionHandle(device);
  EXPECT_EQ(region.kind, MemoryRegionHandle::Kind::kDeviceIpc);
  EXPECT_EQ(region.ipc_handle, std::string("\x01\x00\x02", 3));
  EXPECT_EQ(region.device_index, 1);

  rpc::MemoryHandle none;
  none.kind = rpc::MemoryHandleKind::NONE;
  EXPECT_EQ(ToRegionHandle(none).kind, MemoryRegionHandle::Kind::kNone);
}

TEST(ClientPlansTest, RegionHandleClampsANegativeSize) {
  rpc::MemoryHandle handle = HostFile();
  handle.region_size = -5;
  EXPECT_EQ(ToRegionHandle(handle).region_size, 0u);
}

TEST(ClientPlansTest, WritePlanCarriesTheAnswer) {
  auto plan = ToWritePlan(PlanAnswer(1000), "k", 1000, "w1");
  ASSERT_TRUE(plan) << ToString(plan.error());
  EXPECT_EQ(plan->key, "k");
  EXPECT_EQ(plan->node_id, "w2");  // the worker's answer wins
  EXPECT_EQ(plan->tier, "dram");
  EXPECT_EQ(plan->memory.kind, MemoryRegionHandle::Kind::kHostFile);
  EXPECT_EQ(plan->offset, 4096u);
  EXPECT_EQ(plan->size, 1000u);
  EXPECT_EQ(plan->epoch, 17);
  EXPECT_EQ(plan->timeout_ms, 30000);
}

TEST(ClientPlansTest, WritePlanFallsBackToTheAskedNode) {
  rpc::WritePlan answer = PlanAnswer(10);
  answer.node_id.clear();
  auto plan = ToWritePlan(answer, "k", 10, "w1");
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->node_id, "w1");
}

TEST(ClientPlansTest, WritePlanRefusesABrokenContract) {
  rpc::WritePlan negative = PlanAnswer(10);
  negative.offset = -1;
  auto plan = ToWritePlan(negative, "k", 10, "w1");
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error(), ErrorCode::kInternalError);

  plan = ToWritePlan(PlanAnswer(11), "k", 10, "w1");  // not the size asked for
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error(), ErrorCode::kInternalError);
}

TEST(ClientPlansTest, WritePlanPassesTheWorkersError) {
  rpc::WritePlan answer;
  answer.code = rpc::ErrorCode::TIER_NOT_FOUND;
  auto plan = ToWritePlan(answer, "k", 10, "w1");
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error(), ErrorCode::kTierNotFound);
}

TEST(ClientPlansTest, PlacementCarriesTheAnswerAndTheOwner) {
  rpc::Placement answer;
  answer.code = rpc::ErrorCode::OK;
  answer.node_id = "ignored";
  answer.tier = "vram";
  answer.memory = HostFile();
  answer.offset = 64;
  answer.size = 128;
  answer.version = 3;
  answer.hold_ms = 500;
  auto placement = ToPlacement(answer, "w1");
  ASSERT_TRUE(placement);
  EXPECT_EQ(placement->node_id, "w1");  // the owner that answered
  EXPECT_EQ(placement->tier, "vram");
  EXPECT_EQ(placement->memory.path, "/proc/42/fd/7");
  EXPECT_EQ(placement->offset, 64u);
  EXPECT_EQ(placement->size, 128u);
  EXPECT_EQ(placement->version, 3);
  EXPECT_EQ(placement->hold_ms, 500);
}

TEST(ClientPlansTest, PlacementPassesTheWorkersError) {
  rpc::Placement answer;
  answer.code = rpc::ErrorCode::NOT_OWNER;
  auto placement = ToPlacement(answer, "w1");
  ASSERT_FALSE(placement);
  EXPECT_EQ(placement.error(), ErrorCode::kNotOwner);
}

}  // namespace
}  // namespace mooncake
