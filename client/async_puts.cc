#include "client/async_puts.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace mooncake {
namespace {

// Puts in one batch at most: bounds what one batch holds in memory and how
// long the puts behind it wait. Client::BatchPut slices it further into
// requests of bounded size.
constexpr size_t kMaxPutsPerBatch = 256;
// Batches one helper task sends before it yields its thread.
constexpr int kBatchesPerTask = 64;

// Puts whose options print alike may share a batch.
std::string GroupOf(const PutOptions& o) {
  return fmt::format("{}|{}|{}|{}|{}", o.hard_pin, o.soft_pin, o.soft_pin_ttl_ms, o.preferred_node,
                     o.preferred_tier);
}

}  // namespace

void AsyncPuts::Put(std::string key, std::string value, const PutOptions& options, Done done) {
  if (closing_.load()) {
    done(Err(ErrorCode::kRpcFail));
    return;
  }
  std::string group = GroupOf(options);
  bool start = false;
  {
    std::lock_guard lock(mu_);
    Queue& queue = queues_[group];
    if (queue.items.empty() && !queue.sending) queue.options = options;
    queue.items.emplace_back(std::move(key), std::move(value));
    queue.dones.push_back(std::move(done));
    start = !queue.sending;
    queue.sending = true;
  }
  // Nothing on the wire for this group: this put leaves now, alone or with
  // whatever joins it before the helper takes the queue.
  if (start) helpers_.Run([this, group = std::move(group)] { SendBatch(group); });
}

void AsyncPuts::SendBatch(const std::string& group) {
  // Batch after batch on this thread, as long as puts keep arriving: handing
  // the next batch to another helper would add a wake-up to every round.
  // After kBatchesPerTask it goes back to the queue, so one busy group does
  // not keep a helper thread from the others' work.
  for (int round = 0; round < kBatchesPerTask; ++round) {
    std::vector<std::pair<std::string, std::string>> items;
    std::vector<Done> dones;
    PutOptions options;
    {
      std::lock_guard lock(mu_);
      Queue& queue = queues_[group];
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
      options = queue.options;
    }
    batches_.fetch_add(1, std::memory_order_relaxed);
    puts_.fetch_add(items.size(), std::memory_order_relaxed);
    std::vector<Result<void>> results = write_batch_(items, options);
    for (size_t i = 0; i < dones.size(); ++i) {
      dones[i](i < results.size() ? results[i] : Err(ErrorCode::kInternalError));
    }
  }
  helpers_.Run([this, group] { SendBatch(group); });
}

}  // namespace mooncake
