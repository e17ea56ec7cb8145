#include "thrift/rpc_codes.h"

namespace mooncake {

// Every code in common/status.h must exist in the IDL with the same number;
// a mismatch fails the build here rather than on the wire.
static_assert(static_cast<int>(rpc::ErrorCode::OBJECT_NOT_FOUND) ==
              static_cast<int>(ErrorCode::kObjectNotFound));
static_assert(static_cast<int>(rpc::ErrorCode::NO_AVAILABLE_HANDLE) ==
              static_cast<int>(ErrorCode::kNoAvailableHandle));
static_assert(static_cast<int>(rpc::ErrorCode::NODE_NOT_FOUND) ==
              static_cast<int>(ErrorCode::kNodeNotFound));
static_assert(static_cast<int>(rpc::ErrorCode::OBJECT_REPLICA_BUSY) ==
              static_cast<int>(ErrorCode::kObjectReplicaBusy));
static_assert(static_cast<int>(rpc::ErrorCode::NOT_OWNER) ==
              static_cast<int>(ErrorCode::kNotOwner));

}  // namespace mooncake
