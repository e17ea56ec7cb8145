#pragma once

// Private to client/: RdmaReads, the RDMA half of a large get. The first
// chunk of an object always arrives over TCP (it names the version and the
// size); the rest may then be RDMA-READ from the owner's exported tier:
//
//   1. GetPlacement(key) at the owner: the same version and size as the first
//      chunk, in a tier whose placement the owner holds (neither moved nor
//      evicted for hold_ms) and exports for RDMA
//   2. RdmaLink::ReadObject of [from, total) into the caller's sink
//   3. GetPlacement again: the same version, tier and offset, and the hold
//      has not run out, so no upsert, move or reuse touched the bytes read
//
// Anything else (no device here, the owner refuses RDMA, the object is on
// SSD, a transfer fails) leaves the caller to go on over TCP, from the first
// byte not verified. The bytes of a failed attempt are kept when step 3
// vouches for them; otherwise the caller starts the read over.
//
// Ownership: owns its RdmaLink; borrows the caller's channels and sink for
// one call.
//
// Thread-safety: every method may be called from any thread; the link is
// thread-safe, the counters are atomics, everything else is fixed at Open.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "client/client.h"
#include "common/status.h"

namespace mooncake {

class RdmaLink;
struct Owner;

// What one attempt left in the sink, past the bytes the caller had.
struct RdmaReadOutcome {
  // Bytes handed to the sink and known to belong to the version read; the
  // caller continues at from + verified.
  uint64_t verified = 0;
  // The sink holds bytes beyond `verified` that may be wrong (the object
  // changed or its hold ran out): the caller must start the read over.
  bool discard = false;
};

class RdmaReads {
 public:
  // Takes the bytes of the object in order.
  using Write = std::function<Result<void>(std::string_view data)>;

  // From config.rdma / rdma_device / rdma_min_bytes / local_node.
  // kInvalidParams for an unknown mode; with "on",
  // kTierNotFound (logged with the reason) when no device can be opened.
  static Result<std::unique_ptr<RdmaReads>> Open(const ClientConfig& config);
  ~RdmaReads();
  RdmaReads(const RdmaReads&) = delete;
  RdmaReads& operator=(const RdmaReads&) = delete;

  // Whether a read of `total` bytes should try RDMA; costs no RPC.
  bool Wants(uint64_t total) const;

  // Reads bytes [from, total) of `key`, whose first chunk said `version`,
  // from `owner` into `write`. Fails only when `write` does (its error);
  // every RDMA problem is an outcome with what was verified.
  Result<RdmaReadOutcome> Read(const Owner& owner, const std::string& key, int64_t version,
                               uint64_t from, uint64_t total, const Write& write);

  // The node's address changed (it restarted): its queue pair is stale.
  void Forget(const std::string& node_id);

  TransportCounters counters() const;
  // The initiator name this client gives workers in RdmaConnect.
  const std::string& node_id() const { return node_id_; }

 private:
  struct Placement;

  RdmaReads(std::unique_ptr<RdmaLink> link, std::string node_id, std::string reason,
            uint64_t min_bytes);
  // Step 1: the owner's placement, when it allows an RDMA read.
  Result<Placement> Place(const Owner& owner, const std::string& key, int64_t version,
                          uint64_t total, std::string* why);
  // Step 3: whether the bytes read while `before` held are still that object.
  bool Vouch(const Owner& owner, const std::string& key, const Placement& before, std::string* why);
  RdmaReadOutcome Fallback(const Owner& owner, const std::string& key, const std::string& why,
                           RdmaReadOutcome outcome, bool warn);

  // Null when config.rdma is "off"; a disabled link for "auto" without a device.
  const std::unique_ptr<RdmaLink> link_;
  const std::string node_id_;
  const std::string reason_;
  const uint64_t min_bytes_;
  std::atomic<uint64_t> gets_{0}, bytes_{0}, fallbacks_{0};
};

}  // namespace mooncake
