#pragma once

// The counters and limits one RPC server's engines share (thrift/ only):
// connections admitted and refused over max_connections, and connections
// closed by fault, each logged at most once a second per reason.
//
// Thread-safety: every method may be called from any thread. Counters are
// relaxed atomics (read only for monitoring); the rate limiter has its own
// mutex, taken only when a connection is refused or closed for a fault.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/log.h"
#include "common/metrics.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

class RpcGuard {
 public:
  RpcGuard(const RpcServerLimits& limits, int port)
      : max_connections_(limits.max_connections),
        timeouts_{.idle = std::chrono::milliseconds(limits.idle_timeout_ms),
                  .frame = std::chrono::milliseconds(limits.read_timeout_ms),
                  .poll = std::chrono::microseconds(limits.poll_us)},
        port_(port) {}

  const RpcReadTimeouts& timeouts() const { return timeouts_; }
  void SetPort(int port) { port_.store(port, std::memory_order_relaxed); }

  // True when one more connection may be served beside the `active` ones.
  bool Admit(int64_t active) {
    if (active < max_connections_) {
      accepted_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    uint64_t refused = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
    uint64_t suppressed = 0;
    if (warnings_.Admit(kRefusedReason, std::chrono::steady_clock::now(), &suppressed)) {
      MC_LOG_WARN(
          "rpc connection refused port={} reason=max_connections limit={} refused_total={} "
          "suppressed_since_last={}",
          port_.load(std::memory_order_relaxed), max_connections_, refused, suppressed);
    }
    return false;
  }

  // Counts a connection closed for `fault` and logs it: one warning line at
  // most once a second per fault, so a flood of bad frames cannot flood the
  // log (the counter has them all). `peer` is "ip:port" or "unknown".
  void Record(RpcFault fault, const std::string& peer, const char* detail) {
    auto index = static_cast<size_t>(fault);
    uint64_t total = faults_[index].fetch_add(1, std::memory_order_relaxed) + 1;
    int port = port_.load(std::memory_order_relaxed);
    if (fault == RpcFault::kIdleTimeout) {
      MC_LOG_DEBUG("rpc connection idle, closed port={}", port);
      return;
    }
    uint64_t suppressed = 0;
    if (warnings_.Admit(static_cast<int64_t>(index), std::chrono::steady_clock::now(),
                        &suppressed)) {
      MC_LOG_WARN(
          "rpc connection closed port={} peer={} reason={} detail=\"{}\" total={} "
          "suppressed_since_last={}",
          port, peer, RpcFaultName(fault), detail, total, suppressed);
    }
  }

  RpcServerStats Snapshot(int64_t active) const {
    RpcServerStats stats;
    stats.active_connections = active;
    stats.accepted_connections = accepted_.load(std::memory_order_relaxed);
    stats.refused_connections = refused_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < kRpcFaultCount; ++i) {
      stats.faults[i] = faults_[i].load(std::memory_order_relaxed);
    }
    return stats;
  }

 private:
  // The refused-connection warning's reason, beside the faults' indexes.
  static constexpr int64_t kRefusedReason = -1;

  const int64_t max_connections_;
  const RpcReadTimeouts timeouts_;
  std::atomic<int> port_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::array<std::atomic<uint64_t>, kRpcFaultCount> faults_{};
  LogRateLimiter warnings_{std::chrono::seconds(1)};
};

}  // namespace mooncake
