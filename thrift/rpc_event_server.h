#pragma once

// RpcServer's engine for plain TCP (thrift/ only; TLS connections keep one
// thread each, see rpc_server.cc).
//
// A few loop threads wait on one epoll set, taking up to 64 ready
// connections a wait, and answer the calls that cannot block themselves,
// one connection after another: no hand-off between threads, and no sleep
// between replies while other requests wait. On a small machine the wake-ups
// of a thread per connection were the largest cost of a 4 KiB get. A turn on
// one connection reads a bounded share of its bytes, then re-arms it, so a
// peer that never stops sending cannot keep a loop thread from the others.
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
// A handler that waits only for an answer from elsewhere defers its reply
// (RpcDeferReply, thrift/rpc_call_site.h): the thread goes on to other
// connections, the connection rests (not armed) until the reply is sent
// from whichever thread has the answer, and then goes on with its next
// frame (on the pool if one is already here). Stop waits for every
// deferred reply.
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
#include "thrift/rpc_call_site.h"
#include "thrift/rpc_guard.h"
#include "thrift/rpc_server.h"

namespace apache::thrift {
class TProcessor;
namespace transport {
class TMemoryBuffer;
}
}  // namespace apache::thrift

namespace mooncake {

class DeferredEventReply;
struct EventCallSite;

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
  // Handlers in progress finish first, and deferred replies are sent or
  // dropped. Idempotent.
  void Stop();

 private:
  friend class DeferredEventReply;
  friend struct EventCallSite;
  friend std::shared_ptr<RpcDeferredReply> RpcDeferReply();
  struct Connection;
  struct Worker;
  // How a thread's turn on a connection ended.
  enum class Turn { kWait, kClose, kHandOff, kDeferred };
  // How answering one frame ended.
  enum class Answer { kDone, kFailed, kHandOff, kReplyUnsent, kDeferred };

  RpcEventServer() = default;

  void LoopMain();
  void PoolMain();
  // Accepts every waiting connection, then arms the listener again (unless
  // accept() ran out of a resource: see accept_paused_).
  void AcceptAll();
  void ArmListener();
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
  // The reply in `reply` (a frame after kFrameHeaderBytes of space, filled
  // in here), sent without waiting: what the socket does not take at once
  // stays with the connection (`reply` moves there) for the pool to finish.
  Answer SendOrKeep(Connection& conn,
                    std::shared_ptr<apache::thrift::transport::TMemoryBuffer>& reply);
  // Sends a call's reply in `output` (kFrameHeaderBytes of space, then the
  // message; none for a oneway call): on a loop thread without waiting
  // (SendOrKeep), on the pool as a whole.
  Answer SendReply(Connection& conn, Worker& worker,
                   std::shared_ptr<apache::thrift::transport::TMemoryBuffer>& output);
  // Whether a whole frame of `conn`'s waits to be answered.
  static bool HasWholeFrame(const Connection& conn);
  // After a call that deferred its reply: parks `deferred` (kDeferred), or
  // sends its reply where it was sent within the call, or closes the
  // connection where the handler dropped it unsent.
  Answer SettleDeferred(Connection& conn, Worker& worker,
                        std::shared_ptr<DeferredEventReply> deferred);
  // A parked reply's end: sends it (`send`) or closes its connection, and
  // lets the connection go on.
  void FinishDeferred(DeferredEventReply& deferred, bool send);
  void DeferredBorn();
  void DeferredGone();
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
  // accept() failed for want of a resource; housekeeping arms the listener
  // again (AcceptAll left it disarmed).
  std::atomic<bool> accept_paused_{false};
  std::vector<std::thread> loops_;

  std::mutex connections_mu_;
  // Shared with their deferred replies, which may outlive the connection's
  // close.
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections_;  // guarded
  std::atomic<int64_t> active_{0};

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<Connection*> handed_;                            // guarded by pool_mu_
  std::unordered_map<std::thread::id, std::thread> threads_;  // guarded by pool_mu_
  std::vector<std::thread::id> finished_;                     // guarded by pool_mu_
  // Pool threads waiting for a connection, or started and about to.
  int available_threads_ = 0;  // guarded by pool_mu_
  int max_threads_ = 0;

  std::mutex deferred_mu_;
  std::condition_variable deferred_cv_;
  int64_t live_deferred_ = 0;  // guarded by deferred_mu_: RpcDeferredReply objects

  std::mutex housekeeping_mu_;
  std::condition_variable housekeeping_cv_;
  std::thread housekeeping_;
};

}  // namespace mooncake
