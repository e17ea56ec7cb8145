#pragma once

// Private to client/: how a client call follows an object to its current
// owner. An object may move between nodes (inter-node eviction) while a
// client talks to its old owner, be replaced under a read (Upsert), or be in
// the middle of a write (REPLICA_IS_NOT_READY). Every path (single calls,
// chunked reads, batches, upserts) bounds its retries with the limits here,
// so they agree and are tuned in one place.

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "client/client_router.h"
#include "common/status.h"

namespace mooncake {

// Following an object twice covers a move during a move.
inline constexpr int kMaxRelocations = 2;
// A read restarts when the object is replaced under it (Upsert).
inline constexpr int kMaxReadRestarts = 3;
// REPLICA_IS_NOT_READY lasts as long as one write; back off ~0.2 s in all.
inline constexpr int kMaxNotReadyRetries = 8;

// Sleeps before retry number `attempt` (0-based): 1, 2, 4 ... ms, capped at 50.
inline void Backoff(int attempt) {
  auto delay = std::chrono::milliseconds(std::min(1 << std::min(attempt, 6), 50));
  std::this_thread::sleep_for(delay);
}

// The node no longer has the key (it moved, or was removed).
inline bool IsMoved(ErrorCode code) {
  return code == ErrorCode::kObjectNotFound || code == ErrorCode::kNotOwner;
}

// A node the client picked did not take a new object: it has no room, or
// cannot be reached (a dead worker stays in the registry until node_ttl).
inline bool IsRefusedPlacement(ErrorCode code) {
  return code == ErrorCode::kNoAvailableHandle || code == ErrorCode::kRpcFail;
}

// A node that still denies the key after we followed it means the key is gone.
inline ErrorCode Settle(ErrorCode code) {
  return code == ErrorCode::kNotOwner ? ErrorCode::kObjectNotFound : code;
}

// Runs `fn(owner)` against the key's owner, following the object once more
// each time the node says it no longer has it, and waiting out a write in
// progress (REPLICA_IS_NOT_READY). A template because each caller's `fn`
// returns its own result type T.
template <typename T, typename Fn>
Result<T> WithOwner(ClientRouter& router, const std::string& key, Fn&& fn) {
  auto owner = router.Locate(key);
  if (!owner) return Err(owner.error());
  int moves = 0;
  int waits = 0;
  for (;;) {
    Result<T> result = fn(*owner);
    if (result) return result;
    ErrorCode code = result.error();
    if (code == ErrorCode::kReplicaIsNotReady && waits < kMaxNotReadyRetries) {
      Backoff(waits++);
      continue;
    }
    // A remembered owner that cannot be reached may simply be gone: ask the
    // master before giving up.
    bool unreachable = code == ErrorCode::kRpcFail || code == ErrorCode::kRpcTimeout;
    if (unreachable && owner->cached && moves++ < kMaxRelocations) {
      owner = router.RelocateUnreachable(key, *owner, code);
      if (!owner) return Err(owner.error());
      continue;
    }
    if (!IsMoved(code) || moves++ >= kMaxRelocations) return Err(Settle(code));
    owner = router.Relocate(key, "", owner->node_id);
    if (!owner) return Err(Settle(owner.error()));
  }
}

}  // namespace mooncake
