#include "master/leader_election.h"

#include <algorithm>
#include <utility>

#include "common/etcd_client.h"
#include "common/log.h"

namespace mooncake {
namespace {

int64_t Ticks(SteadyClock::time_point t) { return t.time_since_epoch().count(); }

// A leader stops answering as one this long before its lease ends as it
// knows it, leaving room for clock rates and the standby's poll.
Millis LeaseMargin(int64_t ttl_s) { return std::min(Millis(500), Millis(ttl_s * 1000 / 4)); }

// Pause between reads of the leader key after a read failed.
constexpr Millis kReadRetry{50};

}  // namespace

RoleGate::RoleGate(std::string cluster_name, Millis rebuild_window)
    : cluster_name_(std::move(cluster_name)), rebuild_window_(rebuild_window) {}

void RoleGate::set_self_address(std::string address) {
  std::lock_guard lock(mu_);
  // A leader names itself as the leader (GetRole): a caller told
  // NOT_LEADER by a master that names itself waits and retries there.
  if (leader_ && leader_address_ == self_address_) leader_address_ = address;
  self_address_ = std::move(address);
}

void RoleGate::LeadAlone() {
  {
    std::lock_guard lock(mu_);
    standalone_ = true;
  }
  BecomeLeader(SteadyClock::time_point::max());
}

void RoleGate::BecomeLeader(SteadyClock::time_point valid_until) {
  std::lock_guard lock(mu_);
  serve_from_ = Ticks(SteadyClock::now() + rebuild_window_);
  valid_until_ = Ticks(valid_until);
  leader_address_ = self_address_;
  leader_ = true;
}

void RoleGate::BecomeStandby(std::string leader_address) {
  std::lock_guard lock(mu_);
  leader_ = false;
  leader_address_ = std::move(leader_address);
}

void RoleGate::set_campaign_problem(std::string problem) {
  std::lock_guard lock(mu_);
  campaign_problem_ = std::move(problem);
}

void RoleGate::ExtendLeadership(SteadyClock::time_point valid_until) {
  valid_until_ = Ticks(valid_until);
}

bool RoleGate::leader() const {
  return leader_.load() && Ticks(SteadyClock::now()) < valid_until_.load();
}

bool RoleGate::serving_keys() const {
  return leader() && Ticks(SteadyClock::now()) >= serve_from_.load();
}

RoleSnapshot RoleGate::Snapshot() const {
  RoleSnapshot out;
  out.serving_keys = serving_keys();
  out.leader = leader();
  std::lock_guard lock(mu_);
  out.standalone = standalone_;
  out.leader_address = leader_address_;
  out.cluster_name = cluster_name_;
  out.self_address = self_address_;
  out.campaign_problem = campaign_problem_;
  return out;
}

LeaderElection::LeaderElection(ElectionOptions options, RoleGate& gate,
                               std::function<void()> on_lost, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)),
      key_(MasterLeaderKey(options_.cluster_name)),
      gate_(gate),
      on_lost_(std::move(on_lost)),
      etcd_(std::move(etcd)) {}

Result<std::unique_ptr<LeaderElection>> LeaderElection::Start(ElectionOptions options,
                                                              RoleGate& gate,
                                                              std::function<void()> on_lost) {
  if (options.lease_ttl_s <= 0 || options.poll_interval <= Millis(0)) {
    return Err(ErrorCode::kInvalidParams);
  }
  // An etcd call must end well inside the lease's TTL.
  int timeout_ms = static_cast<int>(std::clamp<int64_t>(options.lease_ttl_s * 1000 / 3, 200, 1000));
  auto etcd = EtcdClient::Create(options.etcd_endpoints, timeout_ms);
  if (!etcd) return Err(etcd.error());
  gate.set_self_address(options.self_address);
  gate.BecomeStandby("");
  std::unique_ptr<LeaderElection> election(
      new LeaderElection(std::move(options), gate, std::move(on_lost), std::move(*etcd)));
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (leading_) {
    gate_.BecomeStandby("");
    leading_ = false;
    // Revoking deletes the leader key: a standby takes over at its next poll.
    auto revoked = etcd_->Revoke(lease_);
    MC_LOG_INFO("master resigned leadership cluster={} address={} revoked={}",
                options_.cluster_name, options_.self_address, revoked.has_value());
  }
}

bool LeaderElection::Sleep(Millis period) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, period, [this] { return stopping_; });
}

void LeaderElection::Run() {
  const Millis keepalive_period(std::max<int64_t>(100, options_.lease_ttl_s * 1000 / 3));
  for (;;) {
    if (leading_) {
      if (!LeaderRound()) {
        if (!Sleep(options_.poll_interval)) return;
        continue;
      }
      // Refresh sooner when the last refresh failed (lease_expiry_ is near).
      auto left = std::chrono::duration_cast<Millis>(lease_expiry_ - SteadyClock::now());
      if (!Sleep(std::clamp(left / 3, Millis(100), keepalive_period))) return;
    } else {
      if (!retired_) StandbyRound();
      if (!Sleep(options_.poll_interval)) return;
    }
  }
}

void LeaderElection::StandbyRound() {
  auto current = etcd_->Get(key_);
  if (!current) {
    if (!etcd_warned_) {
      MC_LOG_WARN("etcd unreachable; standing by cluster={} error={}", options_.cluster_name,
                  ToString(current.error()));
    }
    etcd_warned_ = true;
    return;
  }
  etcd_warned_ = false;
  if (*current) {
    CampaignOk();
    gate_.BecomeStandby((*current)->value);
    return;
  }
  // No leader: campaign. The lease's clock starts before the grant, so our
  // idea of its expiry is never later than etcd's.
  auto started = SteadyClock::now();
  int64_t ttl_s = 0;
  auto lease = etcd_->Grant(options_.lease_ttl_s, &ttl_s);
  if (!lease) {
    CannotCampaign("grant a lease");
    return;
  }
  auto outcome = etcd_->CreateIfAbsent(key_, options_.self_address, *lease);
  if (!outcome) CannotCampaign("create the leader key");
  if (!outcome || !outcome->created) {
    (void)etcd_->Revoke(*lease);
    if (outcome && outcome->existing) {
      CampaignOk();
      gate_.BecomeStandby(outcome->existing->value);
    }
    return;
  }
  CampaignOk();
  lease_ = *lease;
  lease_expiry_ = started + std::chrono::seconds(ttl_s);
  alive_until_ = lease_expiry_;
  leading_ = true;
  gate_.BecomeLeader(lease_expiry_ - LeaseMargin(options_.lease_ttl_s));
  MC_LOG_INFO("master became leader cluster={} address={} lease={} ttl_s={}", options_.cluster_name,
              options_.self_address, lease_, ttl_s);
}

bool LeaderElection::LeaderRound() {
  const Millis margin = LeaseMargin(options_.lease_ttl_s);
  auto started = SteadyClock::now();
  auto ttl = etcd_->KeepAlive(lease_);
  if (!ttl && ttl.error() == ErrorCode::kObjectNotFound) {
    Lose("the lease expired");
    return false;
  }
  if (ttl) {
    // etcd keeps the lease at least this long.
    alive_until_ = started + std::chrono::seconds(*ttl);
    // A live lease is not enough: the key may have been deleted by hand
    // (etcdctl del) while the lease lives on, and another master may lead
    // already under its own lease. Leadership is extended only once the key
    // is read naming our lease. A read that fails (a timeout, an error, an
    // unparseable reply) is retried at once, without extending anything,
    // while the lease end last confirmed lasts: the gate runs out by itself
    // meanwhile, but one slow read must not turn into a failover.
    for (;;) {
      auto current = etcd_->Get(key_);
      if (current) {
        if (!*current || (*current)->lease != lease_) {
          Lose("the leader key is no longer ours");
          return false;
        }
        lease_expiry_ = alive_until_;
        gate_.ExtendLeadership(lease_expiry_ - margin);
        return true;
      }
      auto left = lease_expiry_ - SteadyClock::now();
      if (left <= SteadyClock::duration::zero()) break;
      if (!Sleep(std::min(kReadRetry, std::chrono::ceil<Millis>(left)))) return true;  // stopping
    }
  }
  // Keep leading (the gate stops answering by itself at the end last
  // confirmed, less the margin) unless etcd may let the lease lapse, or the
  // key has not been read naming our lease for a whole lease: such a master
  // holds the key without serving, so it gives it up for a standby.
  auto now = SteadyClock::now();
  if (now >= lease_expiry_ || now + margin >= alive_until_) {
    Lose(!ttl                   ? "etcd unreachable for most of the lease"
         : now >= lease_expiry_ ? "the leader key not read naming our lease for a whole lease"
                                : "etcd too slow to refresh the lease in time");
    return false;
  }
  return true;
}

void LeaderElection::CannotCampaign(const char* step) {
  // etcd's answer (out of space, too many requests, auth...) is the only
  // clue an operator gets while no master can take over.
  std::string problem = std::string("cannot ") + step + ": " + etcd_->last_error();
  if (problem == campaign_problem_) return;
  MC_LOG_WARN("master cannot campaign for leadership cluster={} address={} reason=\"{}\"",
              options_.cluster_name, options_.self_address, problem);
  gate_.set_campaign_problem(problem);
  campaign_problem_ = std::move(problem);
}

void LeaderElection::CampaignOk() {
  if (campaign_problem_.empty()) return;
  MC_LOG_INFO("master can campaign again cluster={} address={}", options_.cluster_name,
              options_.self_address);
  gate_.set_campaign_problem("");
  campaign_problem_.clear();
}

void LeaderElection::Lose(const char* why) {
  gate_.BecomeStandby("");
  leading_ = false;
  retired_ = true;
  MC_LOG_ERROR("master lost leadership cluster={} address={} reason=\"{}\"", options_.cluster_name,
               options_.self_address, why);
  (void)etcd_->Revoke(lease_);
  if (on_lost_) on_lost_();
}

}  // namespace mooncake
