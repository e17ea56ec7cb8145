#include "worker/claim_batcher.h"

#include <exception>
#include <utility>

#include "common/log.h"

namespace mooncake {

// One claimer. Its condition variable is its own so that finishing a call
// wakes exactly its claimers and the next leader, not every thread that is
// waiting. It is shared with the leader so that the leader can wake it after
// letting go of mu_: a claimer woken while the leader still held mu_ would
// block on mu_ at once, a second sleep and wake-up per claim (on a 2-core
// machine that was a tenth of a put's worker CPU), and once mu_ is released
// the claimer may return, so only shared ownership keeps its cv alive.
struct ClaimBatcher::Waiter {
  const std::string* key;
  Result<void> result;
  bool done = false;  // result is set
  bool lead = false;  // this claimer sends the next call
  std::condition_variable cv;
};

ClaimBatcher::ClaimBatcher(SendFn send, ClaimBatcherOptions options)
    : send_(std::move(send)), options_(options) {}

Result<void> ClaimBatcher::Claim(const std::string& key) {
  auto me = std::make_shared<Waiter>();
  me->key = &key;
  std::unique_lock lock(mu_);
  queue_.push_back(me);
  if (!in_flight_) {
    // Invariant: a non-empty queue has a leader, so an idle batcher's queue
    // held nobody before us and we are at its front.
    in_flight_ = true;
    me->lead = true;
  }
  me->cv.wait(lock, [&] { return me->done || me->lead; });
  // A leader's own result is set by itself, in Lead, which returns unlocked.
  if (!me->done) Lead(lock);
  return me->result;
}

std::vector<std::shared_ptr<ClaimBatcher::Waiter>> ClaimBatcher::TakeBatchLocked() {
  std::vector<std::shared_ptr<Waiter>> batch;
  uint64_t bytes = 0;
  while (!queue_.empty() && batch.size() < options_.max_keys) {
    uint64_t key_bytes = queue_.front()->key->size();
    if (!batch.empty() && bytes + key_bytes > options_.max_key_bytes) break;
    bytes += key_bytes;
    batch.push_back(queue_.front());
    queue_.pop_front();
  }
  return batch;
}

void ClaimBatcher::Lead(std::unique_lock<std::mutex>& lock) {
  // The leader is at the queue's front, so the batch always includes it.
  std::vector<std::shared_ptr<Waiter>> batch = TakeBatchLocked();
  ++calls_;
  claims_ += batch.size();
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (const auto& waiter : batch) keys.push_back(*waiter->key);
  lock.unlock();

  std::vector<Result<void>> results;
  try {
    results = send_(keys);
  } catch (const std::exception& e) {
    // Nothing may escape: every claimer in the batch is waiting for an answer.
    MC_LOG_ERROR("ownership claims failed keys={} error=\"{}\"", keys.size(), e.what());
  }
  if (results.size() != batch.size()) {
    results.assign(batch.size(), Result<void>(Err(ErrorCode::kInternalError)));
  }

  lock.lock();
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->result = std::move(results[i]);
    batch[i]->done = true;
  }
  std::shared_ptr<Waiter> next_leader;
  if (queue_.empty()) {
    in_flight_ = false;
  } else {
    next_leader = queue_.front();
    next_leader->lead = true;
  }
  lock.unlock();
  // The next leader first: its call is what the queue is waiting for.
  if (next_leader) next_leader->cv.notify_one();
  for (const auto& waiter : batch) waiter->cv.notify_one();
}

uint64_t ClaimBatcher::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

uint64_t ClaimBatcher::claims() const {
  std::lock_guard lock(mu_);
  return claims_;
}

size_t ClaimBatcher::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

}  // namespace mooncake
