#include "client/async_puts.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <string>
#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

// Puts in one batch at most: bounds what one batch holds in memory and how
// long the puts behind it wait. Client::BatchPut slices it further into
// requests of bounded size.
constexpr size_t kMaxPutsPerBatch = 256;
// Batches one helper task sends before it yields its thread.
constexpr int kBatchesPerTask = 64;

}  // namespace

void AsyncPuts::Put(std::string key, std::string value, const PutOptions& options, Done done) {
  if (closing_.load()) {
    done(Err(ErrorCode::kRpcFail));
    return;
  }
  const uint64_t bytes = key.size() + value.size();
  Queues::iterator queue;
  bool accepted = false;
  bool start = false;
  {
    std::lock_guard lock(mu_);
    accepted = ReserveLocked(bytes);
    if (accepted) {
      queue = queues_.try_emplace(options).first;
      queue->second.items.emplace_back(std::move(key), std::move(value));
      queue->second.dones.push_back(std::move(done));
      start = !queue->second.sending;
      queue->second.sending = true;
    }
  }
  if (!accepted) {
    // Outside the lock: the completion may put again.
    done(Err(ErrorCode::kObjectReplicaBusy));
    return;
  }
  // Nothing on the wire for this queue: this put leaves now, alone or with
  // whatever joins it before the helper takes the queue.
  if (start) helpers_.Run([this, queue] { SendBatch(queue); });
}

bool AsyncPuts::ReserveLocked(uint64_t bytes) {
  if (pending_puts_ >= limits_.max_puts) return false;
  // Nothing pending takes any size: a value over the bound still goes.
  if (pending_puts_ > 0 && pending_bytes_ + bytes > limits_.max_bytes) return false;
  ++pending_puts_;
  pending_bytes_ += bytes;
  return true;
}

size_t AsyncPuts::queues() const {
  std::lock_guard lock(mu_);
  return queues_.size();
}

void AsyncPuts::SendBatch(Queues::iterator it) {
  const PutOptions& options = it->first;  // a map key: read without the lock
  Queue& queue = it->second;
  // Batch after batch on this thread, as long as puts keep arriving: handing
  // the next batch to another helper would add a wake-up to every round.
  // After kBatchesPerTask it goes back to the queue, so one busy group does
  // not keep a helper thread from the others' work.
  for (int round = 0; round < kBatchesPerTask; ++round) {
    std::vector<std::pair<std::string, std::string>> items;
    std::vector<Done> dones;
    {
      std::lock_guard lock(mu_);
      if (queue.items.empty()) {
        // Nobody else holds it: a Put that finds no queue makes a new one.
        queues_.erase(it);
        return;
      }
      size_t take = std::min(queue.items.size(), kMaxPutsPerBatch);
      items.assign(std::make_move_iterator(queue.items.begin()),
                   std::make_move_iterator(queue.items.begin() + take));
      dones.assign(std::make_move_iterator(queue.dones.begin()),
                   std::make_move_iterator(queue.dones.begin() + take));
      queue.items.erase(queue.items.begin(), queue.items.begin() + take);
      queue.dones.erase(queue.dones.begin(), queue.dones.begin() + take);
    }
    batches_.fetch_add(1, std::memory_order_relaxed);
    puts_.fetch_add(items.size(), std::memory_order_relaxed);
    std::vector<Result<void>> results = WriteGuarded(items, options);
    Release(items);
    for (size_t i = 0; i < dones.size(); ++i) {
      dones[i](i < results.size() ? results[i] : Err(ErrorCode::kInternalError));
    }
  }
  helpers_.Run([this, it] { SendBatch(it); });
}

std::vector<Result<void>> AsyncPuts::WriteGuarded(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  // A helper thread has nobody to catch for it: an exception (no memory,
  // a bug) fails these puts, not the process.
  try {
    return write_batch_(items, options);
  } catch (const std::exception& e) {
    MC_LOG_ERROR("async put batch failed puts={} error={}", items.size(), e.what());
  } catch (...) {
    MC_LOG_ERROR("async put batch failed puts={}", items.size());
  }
  return {};
}

void AsyncPuts::Release(const std::vector<std::pair<std::string, std::string>>& items) {
  uint64_t bytes = 0;
  for (const auto& [key, value] : items) bytes += key.size() + value.size();
  // Before the completions run: one that puts again finds the room.
  std::lock_guard lock(mu_);
  pending_puts_ -= items.size();
  pending_bytes_ -= bytes;
}

}  // namespace mooncake
