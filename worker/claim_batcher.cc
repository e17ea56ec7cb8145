#include "worker/claim_batcher.h"

#include <iterator>
#include <utility>

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

}  // namespace mooncake
