#include "worker/claim_batcher.h"

#include <exception>
#include <iterator>
#include <utility>

#include "common/log.h"

namespace mooncake {

// One claimer: a single put's key, or a batch's keys. Its condition
// variable is its own so that finishing a call wakes exactly its claimers
// and the next leader, not every thread that is waiting. It is shared with
// the leader so that the leader can wake it after letting go of mu_: a
// claimer woken while the leader still held mu_ would block on mu_ at once,
// a second sleep and wake-up per claim (on a 2-core machine that was a tenth
// of a put's worker CPU), and once mu_ is released the claimer may return,
// so only shared ownership keeps its cv alive.
struct ClaimBatcher::Waiter {
  std::span<const std::string> keys;
  uint64_t key_bytes = 0;
  std::vector<Result<void>> results;
  bool done = false;  // results are set
  bool lead = false;  // this claimer sends the next call
  std::condition_variable cv;
};

size_t KeyBatchEnd(std::span<const std::string> keys, size_t begin, size_t max_keys,
                   uint64_t max_bytes) {
  size_t end = begin;
  uint64_t bytes = 0;
  while (end < keys.size() && end - begin < max_keys &&
         (end == begin || bytes + keys[end].size() <= max_bytes)) {
    bytes += keys[end++].size();
  }
  return end;
}

ClaimBatcher::ClaimBatcher(SendFn send, ClaimBatcherOptions options)
    : send_(std::move(send)), options_(options) {}

Result<void> ClaimBatcher::Claim(const std::string& key) {
  return ClaimWithinLimits(std::span<const std::string>(&key, 1)).front();
}

std::vector<Result<void>> ClaimBatcher::ClaimMany(std::span<const std::string> keys) {
  std::vector<Result<void>> results;
  results.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size();) {
    size_t end = KeyBatchEnd(keys, begin, options_.max_keys, options_.max_key_bytes);
    auto answers = ClaimWithinLimits(keys.subspan(begin, end - begin));
    std::move(answers.begin(), answers.end(), std::back_inserter(results));
    begin = end;
  }
  return results;
}

std::vector<Result<void>> ClaimBatcher::ClaimWithinLimits(std::span<const std::string> keys) {
  auto me = std::make_shared<Waiter>();
  me->keys = keys;
  for (const auto& key : keys) me->key_bytes += key.size();
  std::unique_lock lock(mu_);
  queue_.push_back(me);
  queued_keys_ += keys.size();
  if (!in_flight_) {
    // Invariant: a non-empty queue has a leader, so an idle batcher's queue
    // held nobody before us and we are at its front.
    in_flight_ = true;
    me->lead = true;
  }
  me->cv.wait(lock, [&] { return me->done || me->lead; });
  // A leader's own results are set by itself, in Lead, which returns unlocked.
  if (!me->done) Lead(lock);
  return std::move(me->results);
}

std::vector<std::shared_ptr<ClaimBatcher::Waiter>> ClaimBatcher::TakeBatchLocked() {
  std::vector<std::shared_ptr<Waiter>> batch;
  size_t keys = 0;
  uint64_t bytes = 0;
  while (!queue_.empty()) {
    const Waiter& next = *queue_.front();
    bool fits = keys + next.keys.size() <= options_.max_keys &&
                bytes + next.key_bytes <= options_.max_key_bytes;
    // Claimers travel whole; the first one always goes (ClaimMany keeps
    // each within the limits).
    if (!batch.empty() && !fits) break;
    keys += next.keys.size();
    bytes += next.key_bytes;
    queued_keys_ -= next.keys.size();
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

void ClaimBatcher::Lead(std::unique_lock<std::mutex>& lock) {
  // The leader is at the queue's front, so the batch always includes it.
  std::vector<std::shared_ptr<Waiter>> batch = TakeBatchLocked();
  std::vector<std::string> keys;
  for (const auto& waiter : batch)
    keys.insert(keys.end(), waiter->keys.begin(), waiter->keys.end());
  ++calls_;
  claims_ += keys.size();
  lock.unlock();

  std::vector<Result<void>> results;
  try {
    results = send_(keys);
  } catch (const std::exception& e) {
    // Nothing may escape: every claimer in the batch is waiting for an answer.
    MC_LOG_ERROR("ownership claims failed keys={} error=\"{}\"", keys.size(), e.what());
  }
  if (results.size() != keys.size()) {
    results.assign(keys.size(), Result<void>(Err(ErrorCode::kInternalError)));
  }

  lock.lock();
  auto answer = results.begin();
  for (const auto& waiter : batch) {
    auto end = answer + static_cast<std::ptrdiff_t>(waiter->keys.size());
    waiter->results.assign(std::make_move_iterator(answer), std::make_move_iterator(end));
    answer = end;
    waiter->done = true;
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
  return queued_keys_;
}

}  // namespace mooncake
