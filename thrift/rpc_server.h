#pragma once

// A Thrift server on one TCP port: bounded framed transport, strict binary
// protocol, optional mutual TLS. Plain TCP is served by a thread per
// connection or, with RpcEngine::kEpoll, by an epoll loop whose pool threads
// answer frames themselves (thrift/rpc_event_server.h); TLS connections keep
// one thread each (OpenSSL's blocking reads).
//
// What it protects against (docs/design.md, "Trust and limits"): a frame or
// field over the limits of thrift/rpc_limits.h closes that connection with one
// warning line and is counted by fault; at most max_connections are served at
// once (more are accepted, closed at once and counted, while existing clients
// keep working); a connection that sends nothing for idle_timeout_ms, or takes
// longer than read_timeout_ms to send a frame it started, is closed.
//
// Thread-safety: Start/Stop from one owning thread; port() and stats() from
// any thread.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/status.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_settings.h"

namespace apache::thrift {
class TProcessor;
namespace server {
class TThreadedServer;
}
}  // namespace apache::thrift

namespace mooncake {

class RpcEventServer;
class RpcGuard;
class RpcTlsContext;

struct RpcServerOptions {
  std::string host = "127.0.0.1";
  // 0 picks a free port.
  int port = 0;
  RpcServerLimits limits;
  // Off when empty; see thrift/rpc_tls.h.
  TlsSettings tls;
  // For the epoll engine: true for the calls (by method name) whose handlers
  // may wait, on a disk or another server. The engine's loop threads answer
  // every other call themselves and hand these to its pool. Null: every call
  // may wait. A call that waits only sometimes can say so when it does
  // (thrift/rpc_call_site.h).
  std::function<bool(std::string_view method)> may_block;
  // The epoll engine's loop threads; 0: one per core, at least 2 and at
  // most 8.
  int loop_threads = 0;
};

class RpcServer {
 public:
  // Binds host:port and serves in a background thread. Returns once the
  // socket listens; kInvalidParams if the TLS files cannot be loaded,
  // kRpcFail if it cannot bind.
  static Result<std::unique_ptr<RpcServer>> Start(
      std::shared_ptr<apache::thrift::TProcessor> processor, const RpcServerOptions& options);

  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // The bound port (useful when started with port 0).
  int port() const { return port_; }
  RpcServerStats stats() const;
  // Stops accepting, closes connections and joins the serving threads.
  void Stop();

  // The TLS engine's sockets, shared with its accepting socket.
  class ThreadedConnections;

 private:
  RpcServer() = default;
  Result<void> StartThreaded(std::shared_ptr<apache::thrift::TProcessor> processor,
                             const RpcServerOptions& options,
                             std::shared_ptr<const RpcTlsContext> tls);

  std::shared_ptr<RpcGuard> guard_;
  // Exactly one of the two engines is set while serving.
  std::unique_ptr<RpcEventServer> event_server_;
  std::shared_ptr<ThreadedConnections> threaded_;
  std::shared_ptr<apache::thrift::server::TThreadedServer> server_;
  std::thread thread_;
  // Set once serve() has returned (every connection closed).
  std::shared_ptr<std::atomic<bool>> served_;
  int port_ = 0;
};

}  // namespace mooncake
