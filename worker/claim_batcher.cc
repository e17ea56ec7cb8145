#include "worker/claim_batcher.h"

#include <exception>
#include <iterator>
#include <utility>

#include "common/log.h"

namespace mooncake {

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
    : send_(std::move(send)),
      options_(options),
      combiner_([this](std::span<const Claimer* const> claimers) { return SendClaimers(claimers); },
                CallLimits{.max_units = options.max_keys, .max_bytes = options.max_key_bytes},
                [](const Claimer& keys) {
                  CallWeight weight{.units = keys.size(), .bytes = 0};
                  for (const auto& key : keys) weight.bytes += key.size();
                  return weight;
                }) {}

ClaimBatcher::~ClaimBatcher() {
  {
    std::lock_guard lock(async_mu_);
    stopping_ = true;
  }
  async_cv_.notify_all();
  for (auto& sender : senders_) sender.join();
}

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
  auto results = combiner_.Call(keys);
  if (!results) return std::vector<Result<void>>(keys.size(), Err(ErrorCode::kInternalError));
  return std::move(*results);
}

std::vector<std::optional<std::vector<Result<void>>>> ClaimBatcher::SendClaimers(
    std::span<const Claimer* const> claimers) {
  std::vector<std::string> keys;
  for (const Claimer* claimer : claimers) keys.insert(keys.end(), claimer->begin(), claimer->end());
  // A send that throws is caught (and logged) by the combiner, which then
  // settles no claimer: each gets kInternalError in ClaimWithinLimits.
  std::vector<Result<void>> results = send_(keys);
  std::vector<std::optional<std::vector<Result<void>>>> answers;
  // A reply of the wrong length settles nobody either.
  if (results.size() != keys.size()) return answers;
  answers.reserve(claimers.size());
  auto answer = results.begin();
  for (const Claimer* claimer : claimers) {
    auto end = answer + static_cast<std::ptrdiff_t>(claimer->size());
    answers.emplace_back(std::in_place, std::make_move_iterator(answer),
                         std::make_move_iterator(end));
    answer = end;
  }
  return answers;
}

void ClaimBatcher::ClaimAsync(std::string key, ClaimDone done, bool may_lead) {
  std::unique_lock lock(async_mu_);
  if (stopping_) {
    lock.unlock();
    done(Err(ErrorCode::kRpcFail));
    return;
  }
  if (may_lead && !async_sending_ && async_queue_.empty()) {
    async_sending_ = true;
    ++async_calls_;
    lock.unlock();
    std::vector<AsyncClaim> alone;
    alone.push_back(AsyncClaim{std::move(key), std::move(done)});
    SendAsyncBatch(std::move(alone));
    return;
  }
  async_queue_.push_back(AsyncClaim{std::move(key), std::move(done)});
  if (senders_.empty()) {
    for (int i = 0; i < kAsyncSenders; ++i) senders_.emplace_back([this] { SendAsyncClaims(); });
  }
  // With a call out, its sender hands this claim to the next call when it
  // returns: nobody to wake now.
  const bool wake = !async_sending_;
  lock.unlock();
  if (wake) async_cv_.notify_one();
}

uint64_t ClaimBatcher::async_calls() const {
  std::lock_guard lock(async_mu_);
  return async_calls_;
}

size_t ClaimBatcher::async_queued() const {
  std::lock_guard lock(async_mu_);
  return async_queue_.size();
}

std::vector<ClaimBatcher::AsyncClaim> ClaimBatcher::TakeAsyncBatchLocked() {
  std::vector<AsyncClaim> batch;
  uint64_t bytes = 0;
  while (!async_queue_.empty() && batch.size() < options_.max_keys &&
         (batch.empty() || bytes + async_queue_.front().key.size() <= options_.max_key_bytes)) {
    bytes += async_queue_.front().key.size();
    batch.push_back(std::move(async_queue_.front()));
    async_queue_.pop_front();
  }
  ++async_calls_;
  return batch;
}

void ClaimBatcher::SendAsyncClaims() {
  std::unique_lock lock(async_mu_);
  for (;;) {
    // Stopping sends what queued first: each claim's writer waits for it.
    async_cv_.wait(lock, [this] {
      return (!async_queue_.empty() && !async_sending_) || (stopping_ && async_queue_.empty());
    });
    if (async_queue_.empty()) return;
    std::vector<AsyncClaim> batch = TakeAsyncBatchLocked();
    async_sending_ = true;
    lock.unlock();
    SendAsyncBatch(std::move(batch));
    lock.lock();
  }
}

void ClaimBatcher::SendAsyncBatch(std::vector<AsyncClaim> batch) {
  // The keys move to the call: each claim's continuation needs only its
  // answer.
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (AsyncClaim& claim : batch) keys.push_back(std::move(claim.key));
  std::vector<Result<void>> results;
  try {
    results = send_(keys);
  } catch (const std::exception& e) {
    MC_LOG_ERROR("claim call failed keys={} error=\"{}\"", keys.size(), e.what());
  }
  if (results.size() != keys.size()) results.assign(keys.size(), Err(ErrorCode::kInternalError));
  bool more = false;
  {
    std::lock_guard lock(async_mu_);
    async_sending_ = false;
    more = !async_queue_.empty() || stopping_;
  }
  // A sender sends the claims that queued meanwhile while this thread runs
  // the continuations (each sends its put's reply): one call is never held
  // up by the last one's replies.
  if (more) async_cv_.notify_all();
  for (size_t i = 0; i < batch.size(); ++i) {
    try {
      batch[i].done(std::move(results[i]));
    } catch (const std::exception& e) {
      // A continuation's failure is its own; the other claims go on.
      MC_LOG_ERROR("claim continuation failed key={} error=\"{}\"", keys[i], e.what());
    }
  }
}

}  // namespace mooncake
