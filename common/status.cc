#include "common/status.h"

namespace mooncake {

std::string_view ToString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "OK";
    case ErrorCode::kInternalError:
      return "INTERNAL_ERROR";
    case ErrorCode::kNoAvailableHandle:
      return "NO_AVAILABLE_HANDLE";
    case ErrorCode::kInvalidKey:
      return "INVALID_KEY";
    case ErrorCode::kInvalidParams:
      return "INVALID_PARAMS";
    case ErrorCode::kIllegalClient:
      return "ILLEGAL_CLIENT";
    case ErrorCode::kReplicaIsNotReady:
      return "REPLICA_IS_NOT_READY";
    case ErrorCode::kObjectNotFound:
      return "OBJECT_NOT_FOUND";
    case ErrorCode::kObjectAlreadyExists:
      return "OBJECT_ALREADY_EXISTS";
    case ErrorCode::kObjectHasLease:
      return "OBJECT_HAS_LEASE";
    case ErrorCode::kObjectReplicaBusy:
      return "OBJECT_REPLICA_BUSY";
    case ErrorCode::kTransferFail:
      return "TRANSFER_FAIL";
    case ErrorCode::kRpcFail:
      return "RPC_FAIL";
    case ErrorCode::kRpcTimeout:
      return "RPC_TIMEOUT";
    case ErrorCode::kNotOwner:
      return "NOT_OWNER";
    case ErrorCode::kTierNotFound:
      return "TIER_NOT_FOUND";
    case ErrorCode::kNodeNotFound:
      return "NODE_NOT_FOUND";
    case ErrorCode::kNotLeader:
      return "NOT_LEADER";
  }
  return "UNKNOWN_ERROR";
}

ErrorCode ErrorCodeFromInt(int32_t value) {
  auto code = static_cast<ErrorCode>(value);
  return ToString(code) == "UNKNOWN_ERROR" ? ErrorCode::kInternalError : code;
}

Result<void> ValidateKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes || key.find('\0') != std::string_view::npos) {
    return Err(ErrorCode::kInvalidKey);
  }
  return {};
}

}  // namespace mooncake
