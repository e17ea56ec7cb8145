#include "client/async_reads.h"

#include <optional>
#include <string>
#include <utility>

#include "client/client_chunked_io.h"
#include "common/log.h"

namespace mooncake {
namespace {

// The pipeline whose completion this thread is running (its reader thread),
// if any.
thread_local const void* t_completing_for = nullptr;

}  // namespace

AsyncReads::AsyncReads(ClientRouter& router, RdmaReads* rdma, HelperThreads& helpers,
                       ReadInFull read_in_full, bool pipelined)
    : router_(router),
      rdma_(rdma),
      helpers_(helpers),
      read_in_full_(std::move(read_in_full)),
      pipelined_(pipelined),
      pipeline_options_{.connect_timeout_ms = router.rpc_options().connect_timeout_ms,
                        .io_timeout_ms = router.rpc_options().io_timeout_ms,
                        .poll_us = router.rpc_options().poll_us} {}

AsyncReads::~AsyncReads() { Close(); }

void AsyncReads::Close() {
  std::map<const WorkerChannel*, Link> links;
  {
    std::unique_lock lock(mu_);
    closing_ = true;
    // A get still running (a completion's, on a reader thread) uses this
    // and may hold the last copy of a pipeline: it must be done before the
    // helpers stop, or that copy would be destroyed on its own thread.
    close_waits_ = gets_in_progress_ > 0;
    gets_done_.wait(lock, [&] { return gets_in_progress_ == 0; });
    close_waits_ = false;
    links.swap(links_);
  }
  // Gets waiting for a connection go the ordinary way; each pipeline
  // completes its gets in flight, and those that need the slow path queue
  // on the helper threads, which the Client stops after this.
  for (auto& [channel, link] : links) {
    for (PendingGet& get : link.waiting) ReadSlowly(std::move(get.key), std::move(get.done));
  }
  links.clear();
  DestroyDropped();
}

void AsyncReads::AddCounters(TransportCounters& counters) const {
  counters.async_gets_pipelined = pipelined_gets_.load(std::memory_order_relaxed);
  counters.async_gets_slow = slow_gets_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  counters.async_connections = links_.size();
}

void AsyncReads::Get(std::string key, Done done) {
  bool closed = false;
  {
    std::lock_guard lock(mu_);
    closed = closing_;
    if (!closed) ++gets_in_progress_;
  }
  if (closed) {
    done(Err(ErrorCode::kRpcFail));
    return;
  }
  std::optional<Owner> owner = pipelined_ ? router_.LocateCached(key) : std::nullopt;
  if (!owner) {
    ReadSlowly(std::move(key), std::move(done));
  } else {
    SendOrWait(PendingGet{std::move(key), std::move(*owner), std::move(done)});
  }
  std::lock_guard lock(mu_);
  if (--gets_in_progress_ == 0 && closing_) gets_done_.notify_all();
}

void AsyncReads::SendOrWait(PendingGet get) {
  std::shared_ptr<Pipeline> pipeline;
  std::optional<Owner> open_to;
  std::vector<Link> unreachable;  // let go after the lock
  {
    std::lock_guard lock(mu_);
    Link& link = LinkTo(get.owner, unreachable);
    if (link.pipeline && !link.pipeline->broken()) {
      pipeline = link.pipeline;
    } else {
      // Queued behind the connection; the first get to find none opens it.
      if (!link.opening) open_to = get.owner;
      link.opening = true;
      link.waiting.push_back(std::move(get));
    }
  }
  if (pipeline) {
    if (auto* hook = test_hook_holding_pipeline.load(std::memory_order_acquire)) (*hook)(*this);
    Send(*pipeline, std::move(get));
  } else if (open_to) {
    helpers_.Run([this, owner = std::move(*open_to)] { Open(owner); });
  }
}

void AsyncReads::Send(Pipeline& pipeline, PendingGet get) {
  // The completion owns the get; the request borrows its key while written.
  auto state = std::make_shared<PendingGet>(std::move(get));
  bool sent = pipeline.Call<rpc::GetResult>(
      [&](rpc::WorkerServiceClient& c) {
        c.send_Get(state->key, 0, static_cast<int64_t>(kRpcChunkBytes));
      },
      [](rpc::WorkerServiceClient& c, rpc::GetResult& reply) { c.recv_Get(reply); },
      [this, state, self = &pipeline](Result<rpc::GetResult> reply) {
        const void* outer = t_completing_for;
        t_completing_for = self;
        Finish(std::move(*state), std::move(reply));
        t_completing_for = outer;
      });
  // Refused: the connection broke since it was looked up. The get waits
  // for the new one, which the broken one's refusal lets SendOrWait open.
  if (!sent) SendOrWait(std::move(*state));
}

AsyncReads::Link& AsyncReads::LinkTo(const Owner& owner, std::vector<Link>& unreachable) {
  auto [it, added] = links_.try_emplace(owner.channel.get());
  if (added) {
    it->second.channel = owner.channel;
    // A new channel may be a node's new address: the router has then let go
    // of the old one, and this is the moment to drop its link.
    DropUnreachableLinksLocked(unreachable);
  }
  return it->second;
}

void AsyncReads::DropUnreachableLinksLocked(std::vector<Link>& unreachable) {
  for (auto it = links_.begin(); it != links_.end();) {
    Link& link = it->second;
    // Only the link holds its channel: the router replaced it, and no get
    // (whose Owner would hold it too) is on its way there. Nothing can
    // reach the link again, since a channel is only ever copied from one
    // already held.
    if (link.channel.use_count() == 1 && !link.opening && link.waiting.empty()) {
      unreachable.push_back(std::move(link));
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

void AsyncReads::Open(const Owner& owner) {
  auto opened = Pipeline::Open(owner.channel->host(), owner.channel->port(), pipeline_options_);
  if (!opened) {
    MC_LOG_DEBUG("async get connection failed node={} address={}:{}", owner.node_id,
                 owner.channel->host(), owner.channel->port());
  }
  std::shared_ptr<Pipeline> pipeline;
  std::shared_ptr<Pipeline> replaced;  // the broken one, let go after the lock
  std::vector<PendingGet> waiting;
  std::vector<Link> unreachable;  // let go after the lock
  DestroyDropped();
  {
    std::lock_guard lock(mu_);
    Link& link = LinkTo(owner, unreachable);
    link.opening = false;
    waiting.swap(link.waiting);
    if (opened && !closing_) {
      replaced = std::move(link.pipeline);
      link.pipeline = Shared(std::move(*opened));
      pipeline = link.pipeline;
    }
  }
  for (PendingGet& get : waiting) {
    if (pipeline) {
      Send(*pipeline, std::move(get));
    } else {
      ReadSlowly(std::move(get.key), std::move(get.done));
    }
  }
}

std::shared_ptr<AsyncReads::Pipeline> AsyncReads::Shared(std::unique_ptr<Pipeline> pipeline) {
  // A pipeline's destructor joins its reader thread, so no reader thread
  // destroys one: its own would join itself, and two reader threads each
  // destroying the other's pipeline would wait for each other for ever. The
  // last copy let go on a reader thread (a completion that issued a get
  // while a pipeline broke) is set aside for a helper thread. Run() may run
  // a task on the caller (stopped, or no thread to be had): DestroyDropped
  // then leaves it set aside, for the next Open or Close on another thread.
  return std::shared_ptr<Pipeline>(pipeline.release(), [this](Pipeline* dropped) {
    if (t_completing_for != nullptr) {
      {
        std::lock_guard lock(mu_);
        dropped_.push_back(dropped);
      }
      helpers_.Run([this] { DestroyDropped(); });
      return;
    }
    helpers_.Run([dropped] { delete dropped; });
  });
}

void AsyncReads::DestroyDropped() {
  // On a reader thread (a slow path or an Open run on it): everything stays
  // set aside, see Shared.
  if (t_completing_for != nullptr) return;
  std::vector<Pipeline*> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(dropped_);
  }
  for (Pipeline* pipeline : dropped) delete pipeline;
}

void AsyncReads::Finish(PendingGet get, Result<rpc::GetResult> reply) {
  const bool whole = reply && reply->code == rpc::ErrorCode::OK && reply->total_size >= 0 &&
                     static_cast<uint64_t>(reply->total_size) == reply->data.size();
  if (whole) {
    // ReadValue accepts the reply as Get would; with the whole object in
    // hand it makes no call, so it runs here on the reader thread.
    pipelined_gets_.fetch_add(1, std::memory_order_relaxed);
    get.done(ReadValue(router_, rdma_, get.key, std::move(get.owner), &*reply));
    return;
  }
  // Moved, being written, larger than one reply, or no reply at all:
  // ReadValue goes on from the reply, on a helper thread, since it may wait.
  auto first = reply ? std::make_shared<rpc::GetResult>(std::move(*reply)) : nullptr;
  slow_gets_.fetch_add(1, std::memory_order_relaxed);
  helpers_.Run([this, get = std::move(get), first]() mutable {
    get.done(ReadValue(router_, rdma_, get.key, std::move(get.owner), first.get()));
  });
}

void AsyncReads::ReadSlowly(std::string key, Done done) {
  slow_gets_.fetch_add(1, std::memory_order_relaxed);
  helpers_.Run([this, key = std::move(key), done = std::move(done)] { done(read_in_full_(key)); });
}

}  // namespace mooncake
