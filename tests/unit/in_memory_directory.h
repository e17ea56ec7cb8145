#pragma once

// The ownership directory of a single-node cluster, kept in memory: a real
// OwnerDirectory for tests that run a TieredCacheBackend without a master.
//
// Thread-safety: all methods are safe to call concurrently (one mutex).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "worker/tiered_cache_backend.h"

namespace mooncake::testing {

class InMemoryDirectory : public OwnerDirectory {
 public:
  // As the master answers: a key this node owns already is its own again;
  // one another node owns (ClaimElsewhere) is not.
  // With LoseClaimAnswers, a claim is applied and then answered with that
  // error, as when the master's answer is lost.
  // With RegisterAfterNextClaim, that registration runs once the claim is
  // applied and before it is answered.
  // With HoldClaims, a claim waits before it is applied.
  Result<void> Claim(const std::string& key) override {
    {
      std::unique_lock lock(mu_);
      ++claims_waiting_;
      claims_arrived_.notify_all();
      claims_go_.wait(lock, [&] { return !hold_claims_; });
      --claims_waiting_;
    }
    Result<void> claimed = ClaimNow(key);
    std::function<std::vector<std::string>()> registration;
    {
      std::lock_guard lock(mu_);
      if (registrations_after_claims_ > 0) {
        --registrations_after_claims_;
        registration = register_after_claim_;
      }
    }
    if (registration) Register(registration);
    return claimed;
  }
  uint64_t registrations() const override { return registrations_.load(); }
  // As the worker's registration with a master that had forgotten it: this
  // node's keys are purged, the count moves, and the keys `held` lists then
  // are announced (another node's stay theirs).
  void Register(const std::function<std::vector<std::string>()>& held) {
    PurgeAndCount();
    Announce(held());
  }
  // Register's steps apart, as the worker takes them (WorkerServer::
  // RegisterAndAnnounce): the master purges this node's keys and the count
  // moves, then the keys held are listed and announced.
  void PurgeAndCount() {
    {
      std::lock_guard lock(mu_);
      std::erase_if(owned_, [](const auto& entry) { return entry.second == kHere; });
    }
    registrations_.fetch_add(1);
  }
  void Announce(const std::vector<std::string>& keys) {
    std::lock_guard lock(mu_);
    for (const std::string& key : keys) owned_.emplace(key, kHere);
  }
  // The next `claims` claims are each applied, then Register(held) runs,
  // then the claim is answered: the window between a claim's answer and its
  // publish.
  void RegisterAfterNextClaim(std::function<std::vector<std::string>()> held, int claims = 1) {
    std::lock_guard lock(mu_);
    register_after_claim_ = std::move(held);
    registrations_after_claims_ = claims;
  }
  // Claims (not ClaimAsync's: see HoldAsyncClaims) wait from now until
  // LetClaimsGo before they are applied, as claims still on the wire would.
  void HoldClaims() {
    std::lock_guard lock(mu_);
    hold_claims_ = true;
  }
  void LetClaimsGo() {
    std::lock_guard lock(mu_);
    hold_claims_ = false;
    claims_go_.notify_all();
  }
  // Waits up to `timeout` for `n` claims to be held; whether they were.
  bool AwaitHeldClaims(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return claims_arrived_.wait_for(lock, timeout, [&] { return claims_waiting_ >= n; });
  }
  // Claims are applied but answered with `code` (kOk: answered again).
  void LoseClaimAnswers(ErrorCode code) {
    std::lock_guard lock(mu_);
    lost_claim_answer_ = code;
  }
  // Claims are refused with `code` and not applied, as by a master whose
  // key table is full (kOk: granted again).
  void FailClaimsWith(ErrorCode code) {
    std::lock_guard lock(mu_);
    claim_failure_ = code;
  }
  std::vector<Result<void>> ClaimMany(const std::vector<std::string>& keys) override {
    {
      std::lock_guard lock(mu_);
      ++claim_many_calls_;
    }
    return OwnerDirectory::ClaimMany(keys);
  }
  // Answered at once (as the base class does) unless HoldAsyncClaims():
  // then kept until RunHeldClaims, as a master call on the wire would be.
  void ClaimAsync(const std::string& key, std::function<void(Result<void>)> done) override {
    {
      std::lock_guard lock(mu_);
      if (hold_async_) {
        held_.emplace_back(key, std::move(done));
        return;
      }
    }
    done(Claim(key));
  }
  void HoldAsyncClaims() {
    std::lock_guard lock(mu_);
    hold_async_ = true;
  }
  size_t held_claims() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  // Claims the held keys and runs their continuations, in order.
  void RunHeldClaims() {
    std::vector<std::pair<std::string, std::function<void(Result<void>)>>> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    for (auto& [key, done] : held) done(Claim(key));
  }
  // How many batched claims the backend sent.
  int claim_many_calls() {
    std::lock_guard lock(mu_);
    return claim_many_calls_;
  }
  // Waits while releases are held (HoldReleases), as a master call still on
  // the wire would.
  Result<void> Release(const std::string& key) override {
    std::unique_lock lock(mu_);
    ++releases_waiting_;
    releases_arrived_.notify_all();
    releases_go_.wait(lock, [&] { return !hold_releases_; });
    --releases_waiting_;
    if (release_failure_ != ErrorCode::kOk) return Err(release_failure_);
    // As the master: only the owner may release a key.
    if (auto owner = owned_.find(key); owner != owned_.end() && owner->second == kElsewhere) {
      return Err(ErrorCode::kNotOwner);
    }
    if (owned_.erase(key) == 0) return Err(ErrorCode::kObjectNotFound);
    if (lost_release_answer_ != ErrorCode::kOk) {
      if (claimed_elsewhere_after_lost_release_) owned_[key] = kElsewhere;
      return Err(lost_release_answer_);
    }
    return {};
  }
  std::vector<Result<void>> ReleaseMany(const std::vector<std::string>& keys) override {
    {
      std::lock_guard lock(mu_);
      ++release_many_calls_;
      released_in_batches_ += keys.size();
    }
    return OwnerDirectory::ReleaseMany(keys);
  }
  // Releases wait from now until LetReleasesGo.
  void HoldReleases() {
    std::lock_guard lock(mu_);
    hold_releases_ = true;
  }
  void LetReleasesGo() {
    std::lock_guard lock(mu_);
    hold_releases_ = false;
    releases_go_.notify_all();
  }
  // Waits up to `timeout` for `n` releases to be held; whether they were.
  bool AwaitHeldReleases(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return releases_arrived_.wait_for(lock, timeout, [&] { return releases_waiting_ >= n; });
  }
  // How many batched releases the backend sent, and their keys in all.
  int release_many_calls() {
    std::lock_guard lock(mu_);
    return release_many_calls_;
  }
  size_t released_in_batches() {
    std::lock_guard lock(mu_);
    return released_in_batches_;
  }
  // Every release fails with `code` (kOk: they work again), as when the
  // master cannot be reached.
  void FailReleasesWith(ErrorCode code) {
    std::lock_guard lock(mu_);
    release_failure_ = code;
  }
  // Releases are applied but answered with `code` (kOk: answered again);
  // with `then_claimed_elsewhere`, another node puts the key right after.
  void LoseReleaseAnswers(ErrorCode code, bool then_claimed_elsewhere = false) {
    std::lock_guard lock(mu_);
    lost_release_answer_ = code;
    claimed_elsewhere_after_lost_release_ = then_claimed_elsewhere;
  }
  bool Owns(const std::string& key) {
    std::lock_guard lock(mu_);
    return owned_.contains(key);
  }
  // How many claims were made, answered or not.
  int claims() {
    std::lock_guard lock(mu_);
    return claims_;
  }
  // Simulates another node owning a key.
  void ClaimElsewhere(const std::string& key) {
    std::lock_guard lock(mu_);
    owned_[key] = kElsewhere;
  }
  // Simulates the other node releasing a key it owns (ClaimElsewhere).
  void ReleaseElsewhere(const std::string& key) {
    std::lock_guard lock(mu_);
    if (auto owner = owned_.find(key); owner != owned_.end() && owner->second == kElsewhere) {
      owned_.erase(owner);
    }
  }

 private:
  enum Owner { kHere, kElsewhere };
  Result<void> ClaimNow(const std::string& key) {
    std::lock_guard lock(mu_);
    ++claims_;
    if (claim_failure_ != ErrorCode::kOk) return Err(claim_failure_);
    auto [owner, inserted] = owned_.emplace(key, kHere);
    if (!inserted && owner->second != kHere) return Err(ErrorCode::kObjectAlreadyExists);
    if (lost_claim_answer_ != ErrorCode::kOk) return Err(lost_claim_answer_);
    return {};
  }

  std::mutex mu_;
  std::map<std::string, Owner> owned_;                 // guarded by mu_
  int claim_many_calls_ = 0;                           // guarded by mu_
  int release_many_calls_ = 0;                         // guarded by mu_
  size_t released_in_batches_ = 0;                     // guarded by mu_
  ErrorCode release_failure_ = ErrorCode::kOk;         // guarded by mu_
  ErrorCode lost_claim_answer_ = ErrorCode::kOk;       // guarded by mu_
  ErrorCode lost_release_answer_ = ErrorCode::kOk;     // guarded by mu_
  bool claimed_elsewhere_after_lost_release_ = false;  // guarded by mu_
  ErrorCode claim_failure_ = ErrorCode::kOk;           // guarded by mu_
  bool hold_releases_ = false;                         // guarded by mu_
  size_t releases_waiting_ = 0;                        // guarded by mu_
  std::condition_variable releases_go_, releases_arrived_;
  bool hold_claims_ = false;   // guarded by mu_
  size_t claims_waiting_ = 0;  // guarded by mu_
  std::condition_variable claims_go_, claims_arrived_;
  int claims_ = 0;  // guarded by mu_
  std::atomic<uint64_t> registrations_{0};
  std::function<std::vector<std::string>()> register_after_claim_;               // guarded by mu_
  int registrations_after_claims_ = 0;                                           // guarded by mu_
  bool hold_async_ = false;                                                      // guarded by mu_
  std::vector<std::pair<std::string, std::function<void(Result<void>)>>> held_;  // guarded by mu_
};

}  // namespace mooncake::testing
