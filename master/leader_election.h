#pragma once

// Master high availability on etcd (docs/ha.md).
//
// RoleGate holds what this master is right now: a standby (it answers
// NOT_LEADER), a leader still rebuilding its directory from the workers'
// re-announcements (it serves the node registry but answers key calls with
// NOT_LEADER for `rebuild_window`), or a serving leader. A master without
// etcd leads a group of its own for good (LeadAlone) but still rebuilds
// first: it starts with an empty directory, and workers that held keys
// before its restart re-announce them only at their next heartbeat. LeaderElection
// campaigns for the leader key /mooncake/<cluster>/leader in etcd with a
// lease and a create-if-absent transaction, keeps the lease alive at a third
// of its TTL while it leads, and flips the gate.
//
// A leader that loses its lease (etcd unreachable for most of a TTL, the
// lease gone, the key taken, the key not readable for a whole TTL: a failed
// read is retried at once and only delays extending the gate) turns standby
// at once, never campaigns again and reports the loss through `on_lost`: its
// directory may be stale, so the process exits and its supervisor restarts
// it as a fresh standby.
//
// Thread-safety: RoleGate is safe from any thread (atomics for the hot
// checks, mu_ for the addresses). LeaderElection runs one thread; Stop()
// from the owner's thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace mooncake {

class EtcdClient;

struct RoleSnapshot {
  // No HA: the one master of its own group (LeadAlone).
  bool standalone = false;
  bool leader = false;
  // Leader and past its rebuild window: answers key calls.
  bool serving_keys = false;
  std::string leader_address;  // empty when unknown
  std::string cluster_name;
  std::string self_address;
  // A standby's last failed campaign: what etcd answered; empty when none.
  std::string campaign_problem;
};

class RoleGate {
 public:
  RoleGate(std::string cluster_name, Millis rebuild_window);

  void set_self_address(std::string address);
  // No HA: leads from now on for good, answering key calls once the rebuild
  // window has passed (the same window a newly elected leader waits out).
  void LeadAlone();
  // Leads from now until `valid_until` (the lease's end as this master
  // knows it, less a margin); key calls are served once the rebuild window
  // passed. Past `valid_until` the gate answers as a standby by itself, even
  // if the election thread is stuck in a slow etcd call.
  void BecomeLeader(SteadyClock::time_point valid_until);
  // After a lease refresh: leads until `valid_until`.
  void ExtendLeadership(SteadyClock::time_point valid_until);
  // Another master (or none: empty) leads.
  void BecomeStandby(std::string leader_address);
  // Why this standby could not campaign (etcd's answer), or empty.
  void set_campaign_problem(std::string problem);

  bool leader() const;
  bool serving_keys() const;
  RoleSnapshot Snapshot() const;

 private:
  const std::string cluster_name_;
  const Millis rebuild_window_;
  std::atomic<bool> leader_{false};
  // steady_clock ticks from which key calls are served, and until which
  // this master may lead.
  std::atomic<int64_t> serve_from_{0};
  std::atomic<int64_t> valid_until_{0};
  mutable std::mutex mu_;
  bool standalone_ = false;       // guarded by mu_
  std::string leader_address_;    // guarded by mu_
  std::string self_address_;      // guarded by mu_
  std::string campaign_problem_;  // guarded by mu_
};

struct ElectionOptions {
  std::vector<std::string> etcd_endpoints;
  std::string cluster_name = "mooncake";
  // Published as the leader's address: HOST:PORT of the RPC service.
  std::string self_address;
  // etcd raises a TTL below its minimum (2 s with default settings).
  int64_t lease_ttl_s = 3;
  // How often a standby reads the leader key.
  Millis poll_interval{250};
};

class LeaderElection {
 public:
  // Starts campaigning in a thread. kInvalidParams for unusable endpoints.
  // `gate` must outlive the election; `on_lost` (may be empty) runs on the
  // election thread when leadership is lost.
  static Result<std::unique_ptr<LeaderElection>> Start(ElectionOptions options, RoleGate& gate,
                                                       std::function<void()> on_lost);
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Stops the thread; a leader resigns (revokes its lease, so a standby
  // takes over at its next poll instead of after the TTL). Idempotent.
  void Stop();

 private:
  LeaderElection(ElectionOptions options, RoleGate& gate, std::function<void()> on_lost,
                 std::unique_ptr<EtcdClient> etcd);
  void Run();
  // One standby round: reads the key, campaigns when it is absent.
  void StandbyRound();
  // One leader round: refreshes the lease, then reads the key and extends
  // the gate only when it still names our lease, retrying a failed read
  // while the lease end last confirmed lasts; false when leadership is lost
  // (the key names another lease or none, the lease is gone or etcd may let
  // it lapse, or the key was not read naming our lease for a whole lease).
  bool LeaderRound();
  void Lose(const char* why);
  // A campaign step failed: logs etcd's answer at WARN once until it
  // changes, and shows it in the gate (/readyz).
  void CannotCampaign(const char* step);
  void CampaignOk();
  // Waits up to `period` or until Stop; false when stopping.
  bool Sleep(Millis period);

  const ElectionOptions options_;
  const std::string key_;
  RoleGate& gate_;
  const std::function<void()> on_lost_;
  std::unique_ptr<EtcdClient> etcd_;

  // Used by the election thread only (and by Stop after joining it).
  bool leading_ = false;
  bool retired_ = false;
  int64_t lease_ = 0;
  // The lease's end as last confirmed together with the key being ours
  // (the gate leads until it, less a margin).
  SteadyClock::time_point lease_expiry_;
  // The lease's end as dated from the last successful refresh, whether or
  // not the key could be read after it (never before lease_expiry_).
  SteadyClock::time_point alive_until_;
  bool etcd_warned_ = false;
  std::string campaign_problem_;  // the last one logged; empty when none

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace mooncake
