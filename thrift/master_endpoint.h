#pragma once

// MasterEndpoint: the master as workers, clients and the CLI see it. It
// wraps the pooled RpcChannel of the master that leads now and follows a
// change of leader by itself (docs/ha.md):
//
// * Static address (no etcd): calls go to host:port exactly as a bare
//   RpcChannel would. Only when that master answers NOT_LEADER (it is a
//   standby of an HA group) does the endpoint ask it for the leader
//   (GetRole) and retry there.
// * etcd (MasterTarget.etcd_endpoints): the leader's address is read from
//   etcd (/mooncake/<cluster>/leader). A call that cannot reach its master
//   (RPC_FAIL) or is answered NOT_LEADER re-reads etcd and is retried, with
//   a short backoff, until it gets another answer or `leader_wait_ms` has
//   passed. RPC_TIMEOUT is not retried: the call may have been applied.
//
// Thread-safety: Call() from any number of threads; mu_ guards the current
// channel and its address, resolve_mu_ serialises etcd lookups.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_channel.h"

namespace mooncake {

class EtcdClient;

struct MasterTarget {
  // The master's address when etcd_endpoints is empty.
  std::string host;
  int port = 0;
  // etcd endpoints ("http://HOST:PORT"); non-empty: find the leader there.
  std::vector<std::string> etcd_endpoints;
  std::string cluster_name = "mooncake";
  // How long one call keeps following the leader (a failover, a new
  // leader's rebuild window) before it returns the last error.
  int64_t leader_wait_ms = 15000;

  // "HOST:PORT", or "etcd http://a:2379 cluster NAME" for logs and errors.
  std::string Describe() const;
};

// "HOST:PORT" split into host and port, an IPv6 host written "[::1]:PORT"
// losing its brackets (they set the host off from the port; the resolver
// does not take them). nullopt without a port in 1..65535 or with a lone
// bracket.
std::optional<std::pair<std::string, int>> SplitMasterAddress(std::string_view text);
// The other way: "HOST:PORT", "[HOST]:PORT" when the host holds a ':'.
std::string JoinMasterAddress(const std::string& host, int port);

// Whether a reply from the master says "not the leader": a bare code, a
// result struct with a code, or a batch of them.
template <typename T>
concept ErrorCodeRange =
    std::ranges::range<T> && std::same_as<std::ranges::range_value_t<T>, rpc::ErrorCode::type>;

inline bool SaysNotLeader(rpc::ErrorCode::type code) { return code == rpc::ErrorCode::NOT_LEADER; }
template <typename T>
bool SaysNotLeader(const T& reply) {
  if constexpr (requires { reply.code; }) {
    return reply.code == rpc::ErrorCode::NOT_LEADER;
  } else if constexpr (requires { reply.begin()->code; }) {
    for (const auto& item : reply) {
      if (item.code == rpc::ErrorCode::NOT_LEADER) return true;
    }
    return false;
  } else if constexpr (ErrorCodeRange<T>) {
    // A batch of bare codes (BatchRemoveOwner).
    return std::ranges::find(reply, rpc::ErrorCode::NOT_LEADER) != std::ranges::end(reply);
  } else {
    return false;
  }
}

class MasterEndpoint {
 public:
  using Channel = RpcChannel<rpc::MasterServiceClient>;

  // A target with etcd endpoints that do not parse is logged and leaves
  // the endpoint unable to resolve (every call fails with RPC_FAIL); check
  // with ValidateMasterTarget first.
  MasterEndpoint(MasterTarget target, RpcOptions options);
  ~MasterEndpoint();
  MasterEndpoint(const MasterEndpoint&) = delete;
  MasterEndpoint& operator=(const MasterEndpoint&) = delete;

  // Runs fn(client) at the leader; see the top of this file for retries.
  template <typename Fn>
  auto Call(Fn&& fn) -> Result<std::invoke_result_t<Fn&, rpc::MasterServiceClient&>> {
    using Reply = std::invoke_result_t<Fn&, rpc::MasterServiceClient&>;
    const auto deadline = std::chrono::steady_clock::now() + wait_;
    // A standby refuses calls without a code field (ListNodes) with a
    // TApplicationException "NOT_LEADER ..."; note it on the way through.
    bool refused = false;
    auto noting = [&](rpc::MasterServiceClient& client) -> Reply {
      refused = false;
      try {
        return fn(client);
      } catch (const apache::thrift::TApplicationException& e) {
        refused = std::string_view(e.what()).starts_with("NOT_LEADER");
        throw;
      }
    };
    for (int attempt = 0;; ++attempt) {
      std::shared_ptr<Channel> channel = Current();
      Result<Reply> result = channel ? channel->Call(noting) : Err(ErrorCode::kRpcFail);
      bool not_leader = !result && refused;
      if constexpr (!std::is_void_v<Reply>) not_leader |= result && SaysNotLeader(*result);
      if (!not_leader && (result || result.error() != ErrorCode::kRpcFail)) return result;
      if (!Follow(channel, not_leader, attempt, deadline)) {
        if (!result && refused) return Err(ErrorCode::kNotLeader);
        return result;
      }
    }
  }

  const MasterTarget& target() const { return target_; }
  // "HOST:PORT" that calls go to now; empty while no leader is known.
  std::string address() const;
  // How many times calls moved to another master.
  uint64_t leader_changes() const { return leader_changes_.load(); }
  // Makes every waiting and later Call give up at its next retry (shutdown).
  void Cancel();

 private:
  // The channel of the current master, resolving it (etcd) when unknown.
  std::shared_ptr<Channel> Current();
  // After `failed` could not be reached or answered NOT_LEADER: picks the
  // master to try next, waiting a little first; false to give up.
  bool Follow(const std::shared_ptr<Channel>& failed, bool not_leader, int attempt,
              std::chrono::steady_clock::time_point deadline);
  // Points calls at host:port (keeping the channel when unchanged).
  void SwitchTo(const std::string& host, int port);
  // Sleeps before retry `attempt`; false when cancelled.
  bool Backoff(int attempt, std::chrono::steady_clock::time_point deadline);

  const MasterTarget target_;
  const RpcOptions options_;
  const std::chrono::milliseconds wait_;
  std::unique_ptr<EtcdClient> etcd_;  // null without etcd endpoints
  std::atomic<uint64_t> leader_changes_{0};
  std::atomic<bool> cancelled_{false};

  std::mutex resolve_mu_;
  mutable std::mutex mu_;
  std::condition_variable cancel_cv_;
  std::shared_ptr<Channel> current_;  // guarded by mu_
  std::string address_;               // guarded by mu_
};

// kInvalidParams, with the reason in *message, when neither a valid static
// address nor parseable etcd endpoints are given, or the cluster name is
// empty or holds a '/'.
Result<void> ValidateMasterTarget(const MasterTarget& target, std::string* message);

}  // namespace mooncake
