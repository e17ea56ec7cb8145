#include "worker/claim_batcher.h"

#include <exception>
#include <utility>

#include "common/log.h"

namespace mooncake {

// One claimer, on its own stack while it waits. Its condition variable is
// its own so that finishing a call wakes exactly its claimers and the next
// leader, not every thread that is waiting.
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
  Waiter me{.key = &key};
  std::unique_lock lock(mu_);
  queue_.push_back(&me);
  if (!in_flight_) {
    // Invariant: a non-empty queue has a leader, so an idle batcher's queue
    // held nobody before us and we are at its front.
    in_flight_ = true;
    me.lead = true;
  }
  me.cv.wait(lock, [&] { return me.done || me.lead; });
  if (!me.done) Lead(lock);
  return me.result;
}

std::vector<ClaimBatcher::Waiter*> ClaimBatcher::TakeBatchLocked() {
  std::vector<Waiter*> batch;
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
  std::vector<Waiter*> batch = TakeBatchLocked();
  ++calls_;
  claims_ += batch.size();
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (const Waiter* waiter : batch) keys.push_back(*waiter->key);
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
    batch[i]->cv.notify_one();
  }
  if (queue_.empty()) {
    in_flight_ = false;
  } else {
    queue_.front()->lead = true;
    queue_.front()->cv.notify_one();
  }
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
