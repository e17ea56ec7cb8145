#pragma once

// Private to client/: which node a write goes to. Put, Upsert, their streams,
// OpenForWrite and the batch writes all place objects by these rules, so they
// agree on what preferred_node means and on "one object, one owner" (an
// upsert replaces the object at its owner, never creates a twin elsewhere).
//
// Thread-safety: no state of its own; the router is thread-safe.

#include <cstdint>
#include <functional>
#include <string>

#include "client/client.h"
#include "client/client_router.h"
#include "common/status.h"

namespace mooncake {

rpc::ReplicateConfig ToRpcConfig(const PutOptions& options);

// Writes the object at one node; may be called again with another node.
using WriteAttempt = std::function<Result<void>(const Owner& owner)>;
// Whether a WriteAttempt can be repeated (a stream it read is not consumed).
using CanRetry = std::function<bool()>;

// Runs `attempt` on the chosen target. When the client chose the node itself
// and that node has no room or is unreachable, the master gets one chance to
// name another, provided `attempt` can still be repeated (its input was not
// consumed). Remembers the node that took the object as its owner.
Result<void> PutPlaced(ClientRouter& router, const std::string& key, uint64_t size,
                       const PutOptions& options, const WriteAttempt& attempt,
                       const CanRetry& can_retry);

// Upsert routing. A key with an owner is replaced AT its owner, whatever
// options.preferred_node says. If the owner denies it (the object moved or
// was removed since the master answered), the master is asked once more. A
// key without an owner takes PutPlaced with upsert semantics; if another
// writer's put wins the claim meanwhile (OBJECT_ALREADY_EXISTS), the value is
// upserted at the winner once. Every retry needs `can_retry()`.
Result<void> UpsertRouted(ClientRouter& router, const std::string& key, uint64_t size,
                          const PutOptions& options, const WriteAttempt& attempt,
                          const CanRetry& can_retry);

}  // namespace mooncake
