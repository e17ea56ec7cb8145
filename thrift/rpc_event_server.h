#pragma once

// RpcServer's engine for plain TCP (thrift/ only; TLS connections keep one
// thread each, see rpc_server.cc).
//
// A few loop threads wait on one epoll set, taking up to 64 ready
// connections a wait, and answer the calls that cannot block themselves,
// one connection after another: no hand-off between threads, and no sleep
// between replies while other requests wait. On a small machine the wake-ups
// of a thread per connection were the largest cost of a 4 KiB get.
//
// A call that may block (RpcServerOptions::may_block, e.g. a worker's put,
// which waits for the master; or a handler that asks, thrift/rpc_call_site.h)
// is handed with its connection to a pool, which answers that frame and any
// others already received, and gives the connection back to the loops. When every pool thread is
// busy one more is started, up to one per connection, so a slow handler never holds up another
// connection; pool threads idle for a while exit again. A reply a loop thread cannot send without
// waiting (a large value to a slow reader) is finished by the pool too, so no peer can stall a
// loop.
//
// A connection is served by one thread at a time (EPOLLONESHOT, and not
// re-armed while the pool has it), so its frames are answered in order.
//
// Limits (thrift/rpc_limits.h) are those of the threaded engine: frames are
// checked before their payload is read and buffers grow only with bytes that
// arrived; a connection idle for idle_timeout_ms, or whose started frame has
// not arrived whole in read_timeout_ms, is closed by a housekeeping thread;
// a reply the peer does not take within read_timeout_ms closes it too.
//
// Thread-safety: Start/Stop from one owning thread; port() and
// active_connections() from any thread.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "thrift/rpc_guard.h"
#include "thrift/rpc_server.h"

namespace apache::thrift {
class TProcessor;
}

namespace mooncake {

class RpcEventServer {
 public:
  // Binds host:port and starts serving. kRpcFail if it cannot bind.
  static Result<std::unique_ptr<RpcEventServer>> Start(
      std::shared_ptr<apache::thrift::TProcessor> processor, const RpcServerOptions& options,
      std::shared_ptr<RpcGuard> guard);

  ~RpcEventServer();
  RpcEventServer(const RpcEventServer&) = delete;
  RpcEventServer& operator=(const RpcEventServer&) = delete;

  int port() const { return port_; }
  int64_t active_connections() const { return active_.load(std::memory_order_relaxed); }
  // Stops accepting, wakes and joins every thread, closes every connection.
  // Handlers in progress finish first. Idempotent.
  void Stop();

 private:
  struct Connection;
  struct Worker;
  // How a thread's turn on a connection ended.
  enum class Turn { kWait, kClose, kHandOff };
  // How answering one frame ended.
  enum class Answer { kDone, kFailed, kHandOff, kReplyUnsent };

  RpcEventServer() = default;

  void LoopMain();
  void PoolMain();
  void AcceptAll();
  // A loop thread's turn on `conn`, which epoll reported.
  void ServeOnLoop(Connection& conn, Worker& worker);
  // A pool thread's turn on `conn`, which a loop thread handed over: the
  // rest of an unsent reply, then the whole frames received.
  void ServeInPool(Connection& conn, Worker& worker);
  // Reads what `conn` has sent and answers each whole frame, until it would
  // wait or must hand over.
  Turn ServeConnection(Connection& conn, Worker& worker);
  // Answers the whole frames received; a loop thread stops at one that may
  // block.
  Turn AnswerWholeFrames(Connection& conn, Worker& worker);
  Answer AnswerFrame(Connection& conn, Worker& worker, uint8_t* frame, uint32_t size);
  // A loop thread's send: what the socket does not take at once stays with
  // the connection for the pool to finish.
  Answer SendOrKeep(Connection& conn, Worker& worker, const uint8_t* data, uint32_t size);
  bool SendAll(Connection& conn, const uint8_t* data, size_t size);
  bool Rearm(Connection& conn);
  void Close(Connection* conn);
  void HandToPool(Connection* conn);
  // Starts one more pool thread unless the pool is at its limit or stopping.
  void StartPoolThreadLocked();
  void JoinFinishedThreads();
  void Housekeeping();
  void CloseExpired(std::chrono::steady_clock::time_point now);

  std::shared_ptr<apache::thrift::TProcessor> processor_;
  std::shared_ptr<RpcGuard> guard_;
  std::function<bool(std::string_view method)> may_block_;  // null: every call may
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd, readable once Stop began
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> loops_;

  std::mutex connections_mu_;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;  // guarded
  std::atomic<int64_t> active_{0};

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<Connection*> handed_;                            // guarded by pool_mu_
  std::unordered_map<std::thread::id, std::thread> threads_;  // guarded by pool_mu_
  std::vector<std::thread::id> finished_;                     // guarded by pool_mu_
  // Pool threads waiting for a connection, or started and about to.
  int available_threads_ = 0;  // guarded by pool_mu_
  int max_threads_ = 0;

  std::mutex housekeeping_mu_;
  std::condition_variable housekeeping_cv_;
  std::thread housekeeping_;
};

}  // namespace mooncake
