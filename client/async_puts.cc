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
  Queue* queue = nullptr;
  bool start = false;
  {
    std::lock_guard lock(mu_);
    queue = &QueueFor(options);
    queue->items.emplace_back(std::move(key), std::move(value));
    queue->dones.push_back(std::move(done));
    start = !queue->sending;
    queue->sending = true;
  }
  // Nothing on the wire for this queue: this put leaves now, alone or with
  // whatever joins it before the helper takes the queue.
  if (start) helpers_.Run([this, queue] { SendBatch(*queue); });
}

AsyncPuts::Queue& AsyncPuts::QueueFor(const PutOptions& options) {
  // Writers use a few sets of options each: a short scan, no key to build.
  for (Queue& queue : queues_) {
    if (queue.options == options) return queue;
  }
  queues_.push_back(Queue{.options = options});
  return queues_.back();
}

void AsyncPuts::SendBatch(Queue& queue) {
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
        queue.sending = false;
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
    // A helper thread has nobody to catch for it: an exception (no memory,
    // a bug) fails these puts, not the process.
    std::vector<Result<void>> results;
    try {
      results = write_batch_(items, queue.options);
    } catch (const std::exception& e) {
      MC_LOG_ERROR("async put batch failed puts={} error={}", items.size(), e.what());
      results.clear();
    } catch (...) {
      MC_LOG_ERROR("async put batch failed puts={}", items.size());
      results.clear();
    }
    for (size_t i = 0; i < dones.size(); ++i) {
      dones[i](i < results.size() ? results[i] : Err(ErrorCode::kInternalError));
    }
  }
  helpers_.Run([this, &queue] { SendBatch(queue); });
}

}  // namespace mooncake
