#include "thrift/rpc_server.h"

#include <thrift/TProcessor.h>
#include <thrift/protocol/TProtocol.h>
#include <thrift/server/TServer.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TSocket.h>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

using apache::thrift::TProcessor;
using apache::thrift::protocol::TProtocol;
using apache::thrift::protocol::TProtocolFactory;
using apache::thrift::server::TServerEventHandler;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransport;
using apache::thrift::transport::TTransportFactory;

// Counters and limits one server's socket, transports and processor share.
// Counters are relaxed atomics (read only for monitoring); warnings_ has its
// own mutex, taken only when a connection is refused or closed for a fault.
class RpcServer::Guard {
 public:
  explicit Guard(const RpcServerOptions& options)
      : max_connections_(options.limits.max_connections),
        timeouts_{.idle = std::chrono::milliseconds(options.limits.idle_timeout_ms),
                  .frame = std::chrono::milliseconds(options.limits.read_timeout_ms)},
        port_(options.port) {}

  const RpcReadTimeouts& timeouts() const { return timeouts_; }

  // The server whose connections are counted: set before it serves, null
  // once it has stopped.
  void WatchServer(const TThreadedServer* server) { server_.store(server); }
  void SetPort(int port) { port_.store(port, std::memory_order_relaxed); }

  // True when one more connection may be served.
  bool Admit() {
    // Only called from the serving thread, while the server exists.
    if (server_.load()->getConcurrentClientCount() < max_connections_) {
      accepted_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    uint64_t refused = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
    uint64_t suppressed = 0;
    if (warnings_.Admit(kRefusedReason, std::chrono::steady_clock::now(), &suppressed)) {
      MC_LOG_WARN(
          "rpc connection refused port={} reason=max_connections limit={} refused_total={} "
          "suppressed_since_last={}",
          port_.load(std::memory_order_relaxed), max_connections_, refused, suppressed);
    }
    return false;
  }

  // Counts a connection closed for `fault` and logs it: one warning line at
  // most once a second per fault, so a flood of bad frames cannot flood the
  // log (the counter has them all).
  void Record(RpcFault fault, const BoundedFramedTransport* transport, const char* detail) {
    auto index = static_cast<size_t>(fault);
    uint64_t total = faults_[index].fetch_add(1, std::memory_order_relaxed) + 1;
    int port = port_.load(std::memory_order_relaxed);
    if (fault == RpcFault::kIdleTimeout) {
      MC_LOG_DEBUG("rpc connection idle, closed port={}", port);
      return;
    }
    uint64_t suppressed = 0;
    if (warnings_.Admit(static_cast<int64_t>(index), std::chrono::steady_clock::now(),
                        &suppressed)) {
      MC_LOG_WARN(
          "rpc connection closed port={} peer={} reason={} detail=\"{}\" total={} "
          "suppressed_since_last={}",
          port, transport ? transport->peer() : "unknown", RpcFaultName(fault), detail, total,
          suppressed);
    }
  }

  // Remembers a served connection so that Stop can wake its thread.
  void Track(const std::shared_ptr<TSocket>& socket) {
    std::lock_guard lock(sockets_mu_);
    std::erase_if(sockets_, [](const std::weak_ptr<TSocket>& s) { return s.expired(); });
    sockets_.push_back(socket);
  }

  // Shuts every live connection down, so a thread blocked reading it sees
  // the end of the stream and lets the server stop. (Children are not
  // interruptible: Thrift's interrupt pipe costs a poll() before every read.)
  void ShutdownConnections() {
    std::lock_guard lock(sockets_mu_);
    for (const auto& weak : sockets_) {
      if (auto socket = weak.lock(); socket && socket->getSocketFD() >= 0) {
        ::shutdown(socket->getSocketFD(), SHUT_RDWR);
      }
    }
  }

  RpcServerStats Snapshot() const {
    RpcServerStats stats;
    const TThreadedServer* server = server_.load();
    stats.active_connections = server ? server->getConcurrentClientCount() : 0;
    stats.accepted_connections = accepted_.load(std::memory_order_relaxed);
    stats.refused_connections = refused_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < kRpcFaultCount; ++i) {
      stats.faults[i] = faults_[i].load(std::memory_order_relaxed);
    }
    return stats;
  }

 private:
  // The refused-connection warning's reason, beside the faults' indexes.
  static constexpr int64_t kRefusedReason = -1;

  const int64_t max_connections_;
  const RpcReadTimeouts timeouts_;
  std::atomic<int> port_;
  std::atomic<const TThreadedServer*> server_{nullptr};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::array<std::atomic<uint64_t>, kRpcFaultCount> faults_{};
  // One warning line a second per fault (and for refusals); the counters
  // above have every event.
  LogRateLimiter warnings_{std::chrono::seconds(1)};
  std::mutex sockets_mu_;
  std::vector<std::weak_ptr<TSocket>> sockets_;  // guarded by sockets_mu_
};

namespace {

// Accepts connections, wraps them in TLS when configured, and closes at once
// those over the connection limit (instead of letting them queue unseen in
// the kernel's backlog).
class GuardedServerSocket : public TServerSocket {
 public:
  GuardedServerSocket(const std::string& host, int port, std::shared_ptr<RpcServer::Guard> guard,
                      std::shared_ptr<const RpcTlsContext> tls)
      : TServerSocket(host, port), guard_(std::move(guard)), tls_(std::move(tls)) {
    // An interruptible child polls Thrift's interrupt pipe before every
    // read: one more system call per request. RpcServer::Stop wakes the
    // children by shutting their sockets down instead.
    setInterruptableChildren(false);
  }

 protected:
  std::shared_ptr<TTransport> acceptImpl() override {
    for (;;) {
      auto client = TServerSocket::acceptImpl();
      if (guard_->Admit()) return client;
      client->close();
    }
  }

  std::shared_ptr<TSocket> createSocket(THRIFT_SOCKET fd) override {
    auto socket = tls_ ? tls_->factory().createSocket(fd) : TServerSocket::createSocket(fd);
    guard_->Track(socket);
    return socket;
  }

 private:
  std::shared_ptr<RpcServer::Guard> guard_;
  std::shared_ptr<const RpcTlsContext> tls_;
};

class BoundedTransportFactory : public TTransportFactory {
 public:
  explicit BoundedTransportFactory(RpcReadTimeouts timeouts) : timeouts_(timeouts) {}

  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> client) override {
    auto socket = std::dynamic_pointer_cast<TSocket>(client);
    if (!socket) throw std::logic_error("RpcServer accepted a transport that is not a socket");
    // A peer that stops reading its replies must not park this thread in
    // send() for good.
    socket->setSendTimeout(static_cast<int>(timeouts_.frame.count()));
    return std::make_shared<BoundedFramedTransport>(std::move(socket), timeouts_);
  }

 private:
  const RpcReadTimeouts timeouts_;
};

class BoundedProtocolFactory : public TProtocolFactory {
 public:
  std::shared_ptr<TProtocol> getProtocol(std::shared_ptr<TTransport> transport) override {
    auto framed = std::dynamic_pointer_cast<BoundedFramedTransport>(transport);
    if (!framed) throw std::logic_error("BoundedBinaryProtocol needs a BoundedFramedTransport");
    return std::make_shared<BoundedBinaryProtocol>(std::move(framed));
  }
};

// Runs the service's processor; any exception that escapes it (a frame it
// could not decode, a transport fault, even bad_alloc) closes only this
// connection and is counted, instead of reaching Thrift's thread and, for a
// non-Thrift exception, std::terminate.
class GuardedProcessor : public TProcessor {
 public:
  GuardedProcessor(std::shared_ptr<TProcessor> inner, std::shared_ptr<RpcServer::Guard> guard)
      : inner_(std::move(inner)), guard_(std::move(guard)) {}

  bool process(std::shared_ptr<TProtocol> in, std::shared_ptr<TProtocol> out,
               void* context) override {
    try {
      return inner_->process(in, out, context);
    } catch (const std::exception& e) {
      if (auto fault = ClassifyRpcException(e)) {
        auto* transport = dynamic_cast<const BoundedFramedTransport*>(in->getTransport().get());
        guard_->Record(*fault, transport, e.what());
      }
      return false;
    }
  }

 private:
  std::shared_ptr<TProcessor> inner_;
  std::shared_ptr<RpcServer::Guard> guard_;
};

// Signals once the server socket listens (or serve() failed before it).
class ReadySignal : public TServerEventHandler {
 public:
  void preServe() override { promise_.set_value(true); }
  std::future<bool> future() { return promise_.get_future(); }
  void Fail() {
    try {
      promise_.set_value(false);
    } catch (const std::future_error&) {
      // Already signalled ready; nothing to report.
    }
  }

 private:
  std::promise<bool> promise_;
};

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Start(std::shared_ptr<TProcessor> processor,
                                                    const RpcServerOptions& options) {
  RouteThriftLogsToOurLog();
  std::string why;
  if (auto valid = ValidateRpcServerLimits(options.limits, &why); !valid) {
    MC_LOG_ERROR("rpc server options rejected reason=\"{}\"", why);
    return Err(valid.error());
  }
  auto tls = RpcTlsContext::Create(options.tls, /*server=*/true, &why);
  if (!tls) {
    MC_LOG_ERROR("rpc server cannot load TLS files reason=\"{}\"", why);
    return Err(tls.error());
  }

  auto guard = std::make_shared<Guard>(options);
  auto socket = std::make_shared<GuardedServerSocket>(options.host, options.port, guard, *tls);
  auto server = std::make_shared<TThreadedServer>(
      std::make_shared<GuardedProcessor>(std::move(processor), guard), socket,
      std::make_shared<BoundedTransportFactory>(guard->timeouts()),
      std::make_shared<BoundedProtocolFactory>());
  guard->WatchServer(server.get());
  auto ready = std::make_shared<ReadySignal>();
  server->setServerEventHandler(ready);
  auto ready_future = ready->future();

  std::unique_ptr<RpcServer> result(new RpcServer());
  result->guard_ = guard;
  result->server_ = server;
  result->served_ = std::make_shared<std::atomic<bool>>(false);
  result->thread_ = std::thread([server, ready, served = result->served_, host = options.host,
                                 port = options.port] {
    try {
      server->serve();
    } catch (const std::exception& e) {
      MC_LOG_ERROR("rpc serve failed host={} port={} error=\"{}\"", host, port, e.what());
      ready->Fail();
    }
    served->store(true);
  });
  if (!ready_future.get()) {
    result->thread_.join();
    result->server_.reset();
    return Err(ErrorCode::kRpcFail);
  }
  result->port_ = socket->getPort();
  guard->SetPort(result->port_);
  return result;
}

RpcServer::~RpcServer() { Stop(); }

RpcServerStats RpcServer::stats() const { return guard_ ? guard_->Snapshot() : RpcServerStats{}; }

void RpcServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) {
    // serve() returns once every connection has closed. Shutting them down
    // again each round also catches one accepted just as stop() began.
    while (!served_->load()) {
      guard_->ShutdownConnections();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    thread_.join();
  }
  if (guard_) guard_->WatchServer(nullptr);
  server_.reset();
}

}  // namespace mooncake
