#pragma once

// One connection that carries many calls at once, for callers that keep
// calls in flight instead of waiting on each (mooncake::Client::GetAsync).
// Callers write their requests in turn; one reader thread takes the
// replies, which our servers send in request order on a connection, and
// completes each call with the callback its request registered. Compared
// with RpcChannel (a borrowed connection and a blocked thread per call),
// no thread waits for a reply, and one read can bring many of them.
//
// Plain TCP only: a TLS session cannot be read by one thread while another
// writes to it, so Open refuses TLS (kInvalidParams) and callers use
// RpcChannel there.
//
// Failures: once a request cannot be written or a reply cannot be read
// (the server went away, a reply broke a limit, none came within the I/O
// timeout), the connection is broken: every call still out completes with
// kRpcFail or kRpcTimeout, and Call refuses new ones, so the owner opens a
// new pipeline. The calls are not retried here; whether that is safe is
// the caller's to know.
//
// Thread-safety: Call() is safe from any number of threads, also from a
// completion. Completions run on the reader thread, one at a time, in
// request order; one that blocks delays the replies behind it.

#include <poll.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/status.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

template <typename ClientT>
class RpcPipeline {
 public:
  // Connects to host:port; kRpcFail when it cannot, kInvalidParams when
  // `options` ask for TLS.
  static Result<std::unique_ptr<RpcPipeline>> Open(const std::string& host, int port,
                                                   const RpcOptions& options) {
    if (options.tls) return Err(ErrorCode::kInvalidParams);
    try {
      auto read_side = OpenClientTransport(host, port, options);
      return std::unique_ptr<RpcPipeline>(new RpcPipeline(std::move(read_side)));
    } catch (const std::exception& e) {
      MC_LOG_DEBUG("pipeline connect failed host={} port={} error=\"{}\"", host, port, e.what());
      return Err(ErrorCode::kRpcFail);
    }
  }

  // Completes every call still out (with its reply, or with the failure
  // that broke the connection, at most the I/O timeout later), then closes.
  ~RpcPipeline() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    wake_reader_.notify_all();
    reader_.join();
    read_side_->close();
  }

  RpcPipeline(const RpcPipeline&) = delete;
  RpcPipeline& operator=(const RpcPipeline&) = delete;

  // Writes a request with send(ClientT&), and when its reply is next on the
  // connection reads it with receive(ClientT&, Reply&) (a generated recv_
  // call) and calls done(Result<Reply>) on the reader thread. false: the
  // connection is broken or closing, nothing was sent and done will not be
  // called. true: done is called exactly once. done must not throw.
  template <typename Reply, typename Send, typename Receive, typename Done>
  bool Call(Send&& send, Receive receive, Done done) {
    Pending pending = [receive = std::move(receive), done = std::move(done)](
                          ClientT* client, ErrorCode failure) mutable -> ErrorCode {
      if (client == nullptr) {
        done(Err(failure));
        return failure;
      }
      Reply reply;
      try {
        receive(*client, reply);
      } catch (const std::exception& e) {
        MC_LOG_DEBUG("pipeline read failed error=\"{}\"", e.what());
        ErrorCode code = RpcCallFailure(e);
        done(Err(code));
        return code;
      }
      done(std::move(reply));
      return ErrorCode::kOk;
    };
    std::lock_guard send_lock(send_mu_);
    {
      std::lock_guard lock(mu_);
      if (broken_ || closing_ || (unanswered_ == 0 && PeerHungUp())) {
        broken_ = true;
        return false;
      }
      // Queued before it is written, so its reply always finds it.
      pending_.push_back(std::move(pending));
      ++unanswered_;
    }
    wake_reader_.notify_one();
    try {
      send(*writer_);
    } catch (const std::exception& e) {
      // Part of a frame may be out: nothing after it could be read in step.
      MC_LOG_DEBUG("pipeline write failed error=\"{}\"", e.what());
      Break();
    }
    return true;
  }

  bool broken() const {
    std::lock_guard lock(mu_);
    return broken_;
  }

 private:
  // Reads one reply into the call's result and completes it; or, with a
  // null client, completes the call with `failure`. Returns kOk, or the
  // failure that broke the connection.
  using Pending = std::function<ErrorCode(ClientT* client, ErrorCode failure)>;

  explicit RpcPipeline(std::shared_ptr<BoundedFramedTransport> read_side)
      : read_side_(std::move(read_side)),
        write_side_(read_side_->WriteSide()),
        reader_client_(
            std::make_unique<ClientT>(std::make_shared<BoundedBinaryProtocol>(read_side_))),
        writer_(std::make_unique<ClientT>(std::make_shared<BoundedBinaryProtocol>(write_side_))),
        reader_([this] { ReadReplies(); }) {}

  void ReadReplies() {
    for (;;) {
      Pending next;
      {
        std::unique_lock lock(mu_);
        wake_reader_.wait(lock, [&] { return !pending_.empty() || closing_; });
        if (pending_.empty()) return;  // closing, and nothing is out
        if (broken_) break;
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      ErrorCode outcome = next(reader_client_.get(), ErrorCode::kOk);
      {
        std::lock_guard lock(mu_);
        --unanswered_;
      }
      if (outcome != ErrorCode::kOk) {
        FailTheRest(outcome);
        return;
      }
    }
    FailTheRest(ErrorCode::kRpcFail);
  }

  // After a failed read or write: no call behind it can be answered in step.
  void FailTheRest(ErrorCode failure) {
    std::deque<Pending> rest;
    {
      std::lock_guard lock(mu_);
      broken_ = true;
      rest.swap(pending_);
      unanswered_ = 0;
    }
    // broken_ refuses every later call, so the reader's work is done: its
    // thread ends here rather than idle for as long as the pipeline is kept.
    for (Pending& pending : rest) pending(nullptr, failure);
  }

  // A write failed: the reader stops reading and fails what is out.
  void Break() {
    {
      std::lock_guard lock(mu_);
      broken_ = true;
    }
    // Wakes a reader blocked in recv for a reply that cannot come now.
    ::shutdown(read_side_->socket_fd(), SHUT_RDWR);
    wake_reader_.notify_all();
  }

  // With no call out, anything readable means the server closed the
  // connection (an idle timeout, a restart): better to know before sending.
  bool PeerHungUp() const {
    pollfd probe{.fd = read_side_->socket_fd(), .events = POLLIN | POLLRDHUP, .revents = 0};
    return ::poll(&probe, 1, 0) != 0;
  }

  const std::shared_ptr<BoundedFramedTransport> read_side_;
  const std::shared_ptr<BoundedFramedTransport> write_side_;
  const std::unique_ptr<ClientT> reader_client_;  // reader thread only
  const std::unique_ptr<ClientT> writer_;         // guarded by send_mu_
  std::mutex send_mu_;                            // one request on the wire at a time
  mutable std::mutex mu_;
  std::condition_variable wake_reader_;
  std::deque<Pending> pending_;  // guarded by mu_; in request order
  // Calls written whose completion has not finished: pending_, and the one
  // the reader is reading. Guarded by mu_.
  size_t unanswered_ = 0;
  bool broken_ = false;   // guarded by mu_
  bool closing_ = false;  // guarded by mu_
  std::thread reader_;    // last: starts once the rest is built
};

}  // namespace mooncake
