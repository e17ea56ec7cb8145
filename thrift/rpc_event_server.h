#pragma once

// RpcServer's engine for plain TCP (thrift/ only; TLS connections keep one
// thread each, see rpc_server.cc).
//
// Connections wait in one epoll set and a pool of threads takes turns
// waiting on it (leader/followers). The thread a frame wakes reads it, runs
// the processor and writes the reply itself: no hand-off between threads,
// and under load a thread that has just replied finds the next ready
// connection without going to sleep. A thread per connection, by contrast,
// sleeps after every reply even while other connections have requests
// waiting: on a small machine those context switches were the largest cost
// of a 4 KiB get.
//
// A connection is served by one thread at a time (EPOLLONESHOT), so its
// frames are answered in order. Handlers may block (a put waits for the
// master): when every pool thread is busy one more is started, up to one per
// connection, so a connection never waits behind another's slow handler;
// threads idle for a while exit again.
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
#include <memory>
#include <mutex>
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

  RpcEventServer() = default;

  void ServeLoop();
  void AcceptAll();
  // Reads what `conn` has sent and answers every whole frame. False when the
  // connection must be closed.
  bool ServeConnection(Connection& conn, Worker& worker);
  bool AnswerFrame(Connection& conn, Worker& worker, uint8_t* frame, uint32_t size);
  bool SendAll(Connection& conn, const uint8_t* data, size_t size);
  bool Rearm(Connection& conn);
  void Close(Connection* conn);
  // Starts one more pool thread unless the pool is at its limit or stopping.
  void GrowPool();
  // True when this pool thread may exit: more than the minimum are left.
  bool RetireThisThread();
  void JoinFinishedThreads();
  void Housekeeping();
  void CloseExpired(std::chrono::steady_clock::time_point now);

  std::shared_ptr<apache::thrift::TProcessor> processor_;
  std::shared_ptr<RpcGuard> guard_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd, readable once Stop began
  std::atomic<bool> stopping_{false};

  std::mutex connections_mu_;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;  // guarded
  std::atomic<int64_t> active_{0};

  std::mutex pool_mu_;
  std::unordered_map<std::thread::id, std::thread> threads_;  // guarded by pool_mu_
  std::vector<std::thread::id> finished_;                     // guarded by pool_mu_
  std::atomic<int> idle_threads_{0};
  int max_threads_ = 0;

  std::mutex housekeeping_mu_;
  std::condition_variable housekeeping_cv_;
  std::thread housekeeping_;
};

}  // namespace mooncake
