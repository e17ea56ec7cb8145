// Plan-based writes (docs/design.md, "Plan-based writes") and GetLocation:
// the calls that hand a process on a worker's node a place in a memory tier
// to write or read itself, instead of moving the bytes through the client.
// Placement follows the same rules as Put and Upsert (client_writes.h).

#include "client/client_plans.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include "client/client_impl.h"
#include "client/client_retry.h"
#include "client/client_writes.h"

namespace mooncake {

MemoryRegionHandle ToRegionHandle(const rpc::MemoryHandle& handle) {
  MemoryRegionHandle region;
  switch (handle.kind) {
    case rpc::MemoryHandleKind::HOST_FILE:
      region.kind = MemoryRegionHandle::Kind::kHostFile;
      break;
    case rpc::MemoryHandleKind::DEVICE_IPC:
      region.kind = MemoryRegionHandle::Kind::kDeviceIpc;
      break;
    default:
      region.kind = MemoryRegionHandle::Kind::kNone;
  }
  region.path = handle.path;
  region.ipc_handle = handle.ipc_handle;
  region.device_index = handle.device_index;
  region.region_size = static_cast<uint64_t>(std::max<int64_t>(handle.region_size, 0));
  region.machine_id = handle.machine_id;
  return region;
}

Result<WritePlan> ToWritePlan(const rpc::WritePlan& answer, const std::string& key, uint64_t size,
                              const std::string& node_id) {
  if (answer.code != rpc::ErrorCode::OK) return Err(FromRpc(answer.code));
  if (answer.offset < 0 || answer.size != static_cast<int64_t>(size)) {
    return Err(ErrorCode::kInternalError);  // a worker that breaks the contract
  }
  return WritePlan{.key = key,
                   .node_id = answer.node_id.empty() ? node_id : answer.node_id,
                   .tier = answer.tier,
                   .memory = ToRegionHandle(answer.memory),
                   .offset = static_cast<uint64_t>(answer.offset),
                   .size = size,
                   .epoch = answer.epoch,
                   .timeout_ms = answer.timeout_ms};
}

Result<ObjectPlacement> ToPlacement(const rpc::Placement& answer, const std::string& node_id) {
  if (answer.code != rpc::ErrorCode::OK) return Err(FromRpc(answer.code));
  return ObjectPlacement{.node_id = node_id,
                         .tier = answer.tier,
                         .memory = ToRegionHandle(answer.memory),
                         .offset = static_cast<uint64_t>(answer.offset),
                         .size = static_cast<uint64_t>(answer.size),
                         .version = answer.version,
                         .hold_ms = answer.hold_ms};
}

namespace {

// Asks `owner` to reserve `size` bytes for `key`.
Result<WritePlan> OpenPlanAt(const Owner& owner, const std::string& key, uint64_t size,
                             const rpc::ReplicateConfig& config, bool upsert) {
  rpc::WritePlan answer;
  auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
    c.OpenForWrite(answer, key, static_cast<int64_t>(size), config, upsert);
  });
  if (!call) return Err(call.error());
  return ToWritePlan(answer, key, size, owner.node_id);
}

}  // namespace

Result<WritePlan> Client::OpenForWrite(std::string_view key, uint64_t size,
                                       const PutOptions& options, bool upsert) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  WritePlan plan;
  auto attempt = [&](const Owner& owner) -> Result<void> {
    auto opened = OpenPlanAt(owner, k, size, config, upsert);
    if (!opened) return Err(opened.error());
    plan = std::move(*opened);
    return {};
  };
  auto opened = upsert ? UpsertRouted(impl_->router, k, size, options, attempt, [] { return true; })
                       : PutPlaced(impl_->router, k, size, options, attempt, [] { return true; });
  // As in Upsert: even a failed open may have let the old object go, and
  // the erase discards a fill from a read that started before it.
  if (upsert) impl_->hot_cache.Erase(k);
  if (!opened) return Err(opened.error());
  // The placement routines remember the target as the owner; until Commit
  // the key is not readable there, so readers keep asking the master.
  impl_->router.ForgetOwner(k);
  return plan;
}

Result<void> Client::Commit(const WritePlan& plan) {
  if (auto valid = ValidateKey(plan.key); !valid) return valid;
  auto committed = impl_->router.OnNode(plan.node_id, [&](Owner& node) {
    return Flatten(node.channel->Call(
        [&](rpc::WorkerServiceClient& c) { return c.Commit(plan.key, plan.epoch); }));
  });
  impl_->hot_cache.Erase(plan.key);
  if (committed) impl_->router.RememberOwner(plan.key, plan.node_id);
  return committed;
}

Result<void> Client::Revoke(const WritePlan& plan) {
  // A revoked upsert leaves the key absent, even where an old value was
  // (its space may have been reused); whatever the outcome, as Commit.
  impl_->hot_cache.Erase(plan.key);
  return impl_->router.OnNode(plan.node_id, [&](Owner& node) {
    return Flatten(
        node.channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(plan.epoch); }));
  });
}

Result<ObjectPlacement> Client::GetLocation(std::string_view key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  return WithOwner<ObjectPlacement>(
      impl_->router, k, [&](const Owner& owner) -> Result<ObjectPlacement> {
        rpc::Placement answer;
        auto call =
            owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.GetPlacement(answer, k); });
        if (!call) return Err(call.error());
        return ToPlacement(answer, owner.node_id);
      });
}

}  // namespace mooncake
