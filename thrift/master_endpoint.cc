#include "thrift/master_endpoint.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "common/etcd_client.h"
#include "common/log.h"

namespace mooncake {
namespace {

// etcd lookups are quick; a leader change takes seconds: retry every
// 50 ms at first, then every 250 ms.
constexpr int kFirstBackoffMs = 50;
constexpr int kMaxBackoffMs = 250;
// etcd calls made while following must not hold a caller for long.
constexpr int kEtcdTimeoutMs = 1000;

}  // namespace

std::optional<std::pair<std::string, int>> SplitMasterAddress(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const bool opens = host.front() == '[';
  const bool closes = host.back() == ']';
  if (opens != closes || host == "[]") return std::nullopt;
  if (opens) host = host.substr(1, host.size() - 2);
  int port = 0;
  auto [end, ec] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return std::pair{std::string(host), port};
}

std::string JoinMasterAddress(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string MasterTarget::Describe() const {
  if (etcd_endpoints.empty()) return JoinMasterAddress(host, port);
  std::string out = "etcd ";
  for (size_t i = 0; i < etcd_endpoints.size(); ++i) {
    if (i > 0) out += ",";
    out += etcd_endpoints[i];
  }
  return out + " cluster " + cluster_name;
}

Result<void> ValidateMasterTarget(const MasterTarget& target, std::string* message) {
  auto fail = [&](std::string text) {
    if (message) *message = std::move(text);
    return Err(ErrorCode::kInvalidParams);
  };
  if (target.etcd_endpoints.empty()) {
    if (target.host.empty() || target.port <= 0 || target.port > 65535) {
      return fail("the master must be HOST:PORT");
    }
    return {};
  }
  for (const auto& endpoint : target.etcd_endpoints) {
    if (!ParseEtcdEndpoints(endpoint)) {
      return fail("--etcd must be http://HOST:PORT[,http://HOST:PORT...], got \"" + endpoint +
                  "\"");
    }
  }
  if (target.cluster_name.empty() || target.cluster_name.find('/') != std::string::npos) {
    return fail("--cluster-name must be non-empty and hold no '/'");
  }
  if (target.leader_wait_ms < 0) return fail("the leader wait must not be negative");
  return {};
}

MasterEndpoint::MasterEndpoint(MasterTarget target, RpcOptions options)
    : target_(std::move(target)),
      options_(std::move(options)),
      wait_(std::max<int64_t>(0, target_.leader_wait_ms)) {
  if (target_.etcd_endpoints.empty()) {
    SwitchTo(target_.host, target_.port);
    return;
  }
  auto etcd = EtcdClient::Create(target_.etcd_endpoints, kEtcdTimeoutMs);
  if (!etcd) {
    MC_LOG_ERROR("unusable etcd endpoints target=\"{}\"", target_.Describe());
    return;
  }
  etcd_ = std::move(*etcd);
}

MasterEndpoint::~MasterEndpoint() = default;

std::string MasterEndpoint::address() const {
  std::lock_guard lock(mu_);
  return address_;
}

void MasterEndpoint::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  cancel_cv_.notify_all();
}

void MasterEndpoint::SwitchTo(const std::string& host, int port) {
  std::string address = JoinMasterAddress(host, port);
  std::lock_guard lock(mu_);
  if (current_ && address == address_) return;
  // Keep the pooled connections when the leader is the same as before.
  bool same = address == address_;
  if (!address_.empty() && !same) {
    leader_changes_.fetch_add(1);
    MC_LOG_INFO("following master leader from={} to={}", address_, address);
  }
  if (!same || !current_) {
    current_ = std::make_shared<Channel>(host, port, options_);
  }
  address_ = std::move(address);
}

std::shared_ptr<MasterEndpoint::Channel> MasterEndpoint::Current() {
  {
    std::lock_guard lock(mu_);
    if (current_ || !etcd_) return current_;
  }
  std::lock_guard resolving(resolve_mu_);
  {
    // Another caller may have resolved it while we waited.
    std::lock_guard lock(mu_);
    if (current_) return current_;
  }
  auto leader = etcd_->Get(MasterLeaderKey(target_.cluster_name));
  if (!leader || !*leader) {
    MC_LOG_DEBUG("no master leader in etcd cluster={} error={}", target_.cluster_name,
                 leader ? "none" : ToString(leader.error()));
    return nullptr;
  }
  auto address = SplitMasterAddress((*leader)->value);
  if (!address) {
    MC_LOG_WARN("malformed master leader in etcd cluster={} value=\"{}\"", target_.cluster_name,
                (*leader)->value);
    return nullptr;
  }
  SwitchTo(address->first, address->second);
  std::lock_guard lock(mu_);
  return current_;
}

bool MasterEndpoint::Backoff(int attempt, std::chrono::steady_clock::time_point deadline) {
  auto delay =
      std::chrono::milliseconds(std::min(kMaxBackoffMs, kFirstBackoffMs << std::min(attempt, 4)));
  auto until = std::min(deadline, std::chrono::steady_clock::now() + delay);
  std::unique_lock lock(mu_);
  cancel_cv_.wait_until(lock, until, [this] { return cancelled_.load(); });
  return !cancelled_ && std::chrono::steady_clock::now() < deadline;
}

bool MasterEndpoint::Follow(const std::shared_ptr<Channel>& failed, bool not_leader, int attempt,
                            std::chrono::steady_clock::time_point deadline) {
  if (cancelled_ || std::chrono::steady_clock::now() >= deadline) return false;
  if (!etcd_) {
    if (!not_leader) {
      // Unreachable: the configured address is where the next call starts,
      // even if we had followed a standby's hint elsewhere.
      if (failed && (failed->host() != target_.host || failed->port() != target_.port)) {
        SwitchTo(target_.host, target_.port);
      }
      return false;
    }
    // A standby names the leader in GetRole; a leader still rebuilding its
    // directory names itself, and we wait.
    auto role = failed->Call([](rpc::MasterServiceClient& c) {
      rpc::MasterRole r;
      c.GetRole(r);
      return r;
    });
    if (!role) return false;
    // The master we asked leads, and is still rebuilding: wait for it, at
    // the address we reached it by, whatever it names (a wildcard --host
    // without --advertise-address names none).
    if (role->is_leader) return Backoff(attempt, deadline);
    if (role->leader_address.empty()) return false;
    auto address = SplitMasterAddress(role->leader_address);
    if (!address) return false;
    if (address->first == failed->host() && address->second == failed->port()) {
      return Backoff(attempt, deadline);
    }
    SwitchTo(address->first, address->second);
    return true;
  }
  {
    // Forget the failed master so the next attempt reads etcd again.
    std::lock_guard lock(mu_);
    if (current_ == failed) current_.reset();
  }
  return Backoff(attempt, deadline);
}

}  // namespace mooncake
