#include "client/async_reads.h"

#include <optional>
#include <string>
#include <utility>

#include "client/client_chunked_io.h"
#include "common/log.h"

namespace mooncake {
namespace {

// Slow-path threads: each may wait on a master call or a chunked read, so
// a few; more gets queue behind them.
constexpr size_t kMaxSlowThreads = 4;

std::string AddressOf(const Owner& owner) {
  return owner.channel->host() + ":" + std::to_string(owner.channel->port());
}

}  // namespace

AsyncReads::AsyncReads(ClientRouter& router, RdmaReads* rdma, ReadInFull read_in_full,
                       bool pipelined)
    : router_(router),
      rdma_(rdma),
      read_in_full_(std::move(read_in_full)),
      pipelined_(pipelined),
      pipeline_options_{.connect_timeout_ms = router.config().connect_timeout_ms,
                        .io_timeout_ms = router.config().io_timeout_ms} {}

AsyncReads::~AsyncReads() {
  std::map<std::string, std::shared_ptr<Pipeline>> pipelines;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    pipelines.swap(pipelines_);
  }
  // Each completes its gets in flight; those that need the slow path queue
  // there, which still runs.
  pipelines.clear();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    slow_stopping_ = true;
    threads.swap(slow_threads_);
  }
  slow_ready_.notify_all();
  for (auto& thread : threads) thread.join();
}

void AsyncReads::AddCounters(TransportCounters& counters) const {
  counters.async_gets_pipelined = pipelined_gets_.load(std::memory_order_relaxed);
  counters.async_gets_slow = slow_gets_.load(std::memory_order_relaxed);
}

void AsyncReads::Get(std::string key, Done done) {
  if (closing_.load()) {
    done(Err(ErrorCode::kRpcFail));
    return;
  }
  std::optional<Owner> owner = pipelined_ ? router_.LocateCached(key) : std::nullopt;
  if (!owner) {
    ReadSlowly(std::move(key), std::move(done));
    return;
  }
  std::shared_ptr<Pipeline> pipeline = PipelineTo(*owner);
  if (pipeline) {
    // The completion owns the key and the owner; the request borrows them
    // only while it is written.
    auto state = std::make_shared<std::pair<std::string, Owner>>(std::move(key), *owner);
    bool sent = pipeline->Call<rpc::GetResult>(
        [&](rpc::WorkerServiceClient& c) {
          c.send_Get(state->first, 0, static_cast<int64_t>(kRpcChunkBytes));
        },
        [](rpc::WorkerServiceClient& c, rpc::GetResult& reply) { c.recv_Get(reply); },
        [this, state, done](Result<rpc::GetResult> reply) mutable {
          Finish(state->first, std::move(state->second), std::move(reply), done);
        });
    if (sent) return;
    key = std::move(state->first);
  }
  // No usable connection to the owner: this get goes the slow way, which
  // also opens one for the gets after it.
  RunSlow([this, owner = std::move(*owner)] { Reopen(owner); });
  ReadSlowly(std::move(key), std::move(done));
}

std::shared_ptr<AsyncReads::Pipeline> AsyncReads::PipelineTo(const Owner& owner) {
  std::lock_guard lock(mu_);
  auto it = pipelines_.find(AddressOf(owner));
  if (it == pipelines_.end() || it->second->broken()) return nullptr;
  return it->second;
}

void AsyncReads::Finish(const std::string& key, Owner owner, Result<rpc::GetResult> reply,
                        Done& done) {
  if (reply && reply->code == rpc::ErrorCode::OK && reply->total_size >= 0 &&
      static_cast<uint64_t>(reply->total_size) == reply->data.size()) {
    ObjectValue value;
    value.data.swap(reply->data);
    value.version = reply->version;
    pipelined_gets_.fetch_add(1, std::memory_order_relaxed);
    done(std::move(value));
    return;
  }
  // Moved, being written, larger than one reply, or no reply at all:
  // ReadValue goes on from the reply as Client::Get would from its first.
  auto first = reply ? std::make_shared<rpc::GetResult>(std::move(*reply)) : nullptr;
  slow_gets_.fetch_add(1, std::memory_order_relaxed);
  RunSlow([this, key, owner = std::move(owner), first, done = std::move(done)]() mutable {
    done(ReadValue(router_, rdma_, key, std::move(owner), first.get()));
  });
}

void AsyncReads::Reopen(const Owner& owner) {
  const std::string address = AddressOf(owner);
  if (PipelineTo(owner)) return;  // another get reopened it first
  auto opened = Pipeline::Open(owner.channel->host(), owner.channel->port(), pipeline_options_);
  if (!opened) {
    MC_LOG_DEBUG("async get connection failed node={} address={}", owner.node_id, address);
    return;
  }
  std::shared_ptr<Pipeline> replaced;
  std::lock_guard lock(mu_);
  if (closing_) return;  // the new pipeline closes here, on this thread
  auto& slot = pipelines_[address];
  if (slot && !slot->broken()) return;
  // The old one is destroyed outside the lock, on this slow-path thread:
  // never on its own reader thread, which it joins.
  replaced = std::move(slot);
  slot = std::move(*opened);
}

void AsyncReads::ReadSlowly(std::string key, Done done) {
  slow_gets_.fetch_add(1, std::memory_order_relaxed);
  RunSlow([this, key = std::move(key), done = std::move(done)] { done(read_in_full_(key)); });
}

void AsyncReads::RunSlow(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (!slow_stopping_) {
      slow_queue_.push_back(std::move(task));
      if (slow_idle_ == 0 && slow_threads_.size() < kMaxSlowThreads) {
        slow_threads_.emplace_back([this] { SlowLoop(); });
      } else {
        slow_ready_.notify_one();
      }
      return;
    }
  }
  // Past the slow path's end (a completion's follow-up during destruction):
  // on the caller's thread, so it still completes.
  task();
}

void AsyncReads::SlowLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++slow_idle_;
    slow_ready_.wait(lock, [&] { return !slow_queue_.empty() || slow_stopping_; });
    --slow_idle_;
    if (slow_queue_.empty()) return;  // stopping, and nothing is left
    auto task = std::move(slow_queue_.front());
    slow_queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace mooncake
