#pragma once

// Private to client/: turning the worker's answers about plans and placements
// into the public WritePlan / ObjectPlacement. Kept apart from the RPCs
// (client_plans.cc) so the contract checks can be tested without a worker.

#include <cstdint>
#include <string>

#include "client/client.h"
#include "common/status.h"
#include "mooncake_rpc/WorkerService.h"

namespace mooncake {

MemoryRegionHandle ToRegionHandle(const rpc::MemoryHandle& handle);

// The plan `answer` describes for `key` and `size` bytes at `node_id` (used
// when the answer names no node). INTERNAL_ERROR when the worker broke the
// contract (a negative offset, or a size other than the one asked for);
// the answer's own code otherwise when it is not OK.
Result<WritePlan> ToWritePlan(const rpc::WritePlan& answer, const std::string& key, uint64_t size,
                              const std::string& node_id);

// The placement `answer` reports for an object owned by `node_id`; the
// answer's code when it is not OK.
Result<ObjectPlacement> ToPlacement(const rpc::Placement& answer, const std::string& node_id);

}  // namespace mooncake
