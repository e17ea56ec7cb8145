#pragma once

// Translation between the Thrift wire enum and mooncake::ErrorCode. The two
// share numbers, so this is a checked cast, not a table.

#include "common/status.h"
#include "mooncake_rpc/mooncake_types.h"

namespace mooncake {

inline rpc::ErrorCode::type ToRpc(ErrorCode code) {
  return static_cast<rpc::ErrorCode::type>(static_cast<int32_t>(code));
}

inline ErrorCode FromRpc(rpc::ErrorCode::type code) {
  return ErrorCodeFromInt(static_cast<int32_t>(code));
}

inline rpc::ErrorCode::type ToRpc(const Result<void>& result) {
  return result ? rpc::ErrorCode::OK : ToRpc(result.error());
}

inline Result<void> ToResult(rpc::ErrorCode::type code) {
  if (code == rpc::ErrorCode::OK) return {};
  return Err(FromRpc(code));
}

}  // namespace mooncake
