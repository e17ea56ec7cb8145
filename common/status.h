#pragma once

// One error vocabulary for the whole project. The numbers match the Thrift
// enum (thrift/mooncake.thrift) and Mooncake Store, so a code read in a log,
// a CLI message or a Python client means the same thing everywhere.

#include <cstdint>
#include <expected>
#include <string_view>

namespace mooncake {

enum class ErrorCode : int32_t {
  kOk = 0,
  kInternalError = -1,
  kNoAvailableHandle = -200,  // no space in any tier that could take it
  kInvalidKey = -400,
  kInvalidParams = -600,
  kIllegalClient = -601,  // a writer whose write was pre-empted or discarded
  kReplicaIsNotReady = -703,
  kObjectNotFound = -704,
  kObjectAlreadyExists = -705,
  kObjectHasLease = -706,
  kObjectReplicaBusy = -714,
  kTransferFail = -800,
  kRpcFail = -900,
  kRpcTimeout = -901,
  kNotOwner = -2001,
  kTierNotFound = -2002,
  kNodeNotFound = -2003,
  kNotLeader = -2004,  // a standby master answered; retry at the leader
};

// The Mooncake name of a code ("OBJECT_NOT_FOUND"), or "UNKNOWN_ERROR".
std::string_view ToString(ErrorCode code);

// Maps a raw wire value to a known code; unknown values become kInternalError.
ErrorCode ErrorCodeFromInt(int32_t value);

template <typename T>
using Result = std::expected<T, ErrorCode>;

// Shorthand for returning an error: `return Err(ErrorCode::kInvalidKey);`
inline std::unexpected<ErrorCode> Err(ErrorCode code) { return std::unexpected(code); }

// Limits every entry point enforces before touching state.
inline constexpr size_t kMaxKeyBytes = 4096;
// Largest payload one RPC carries. Thrift 0.17 frames cap at ~16 MB, so larger
// values travel as a two-phase write (PutStart/PutChunk/PutEnd) or as several
// ranged Gets of at most this many bytes.
inline constexpr uint64_t kRpcChunkBytes = 4ull << 20;

// Validates a user key: non-empty, at most kMaxKeyBytes, no NUL bytes.
Result<void> ValidateKey(std::string_view key);

}  // namespace mooncake
