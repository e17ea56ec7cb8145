#include "thrift/rpc_server.h"

#include <sys/socket.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TProtocol.h>
#include <thrift/server/TServer.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TSocket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/spare_cpu.h"
#include "thrift/rpc_event_server.h"
#include "thrift/rpc_guard.h"
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
using apache::thrift::transport::TTransportException;
using apache::thrift::transport::TTransportFactory;

// The TLS engine's live connections: counted for the connection limit, and
// remembered so that Stop can wake their threads.
class RpcServer::ThreadedConnections {
 public:
  // The server whose connections are counted: set before it serves, null
  // once it has stopped.
  void WatchServer(const TThreadedServer* server) { server_.store(server); }

  int64_t active() const {
    const TThreadedServer* server = server_.load();
    return server ? server->getConcurrentClientCount() : 0;
  }

  // A plain socket for an accepted connection whose close() waits for
  // ShutdownAll, so a shutdown never lands on a descriptor number that
  // close() has just handed back to the kernel (and maybe to another
  // connection). TLS sockets come from OpenSSL's factory and are not wrapped.
  std::shared_ptr<TSocket> NewPlainSocket(THRIFT_SOCKET fd) {
    return std::make_shared<TrackedSocket>(fd, sockets_mu_);
  }

  void Track(const std::shared_ptr<TSocket>& socket) {
    std::lock_guard lock(*sockets_mu_);
    std::erase_if(sockets_, [](const std::weak_ptr<TSocket>& s) { return s.expired(); });
    sockets_.push_back(socket);
  }

  // Shuts every live connection down, so a thread blocked reading it sees
  // the end of the stream and lets the server stop. (Children are not
  // interruptible: Thrift's interrupt pipe costs a poll() before every read.)
  void ShutdownAll() {
    // Released after the lock: the last reference closes its socket, and
    // closing takes the lock.
    std::vector<std::shared_ptr<TSocket>> alive;
    std::lock_guard lock(*sockets_mu_);
    for (const auto& weak : sockets_) {
      if (auto socket = weak.lock(); socket && socket->getSocketFD() >= 0) {
        ::shutdown(socket->getSocketFD(), SHUT_RDWR);
        alive.push_back(std::move(socket));
      }
    }
  }

 private:
  class TrackedSocket : public TSocket {
   public:
    TrackedSocket(THRIFT_SOCKET fd, std::shared_ptr<std::mutex> mu)
        : TSocket(fd), mu_(std::move(mu)) {}
    // TSocket's destructor would call its own close(), not this one.
    ~TrackedSocket() override { close(); }
    void close() override {
      std::lock_guard lock(*mu_);
      TSocket::close();
    }

   private:
    std::shared_ptr<std::mutex> mu_;
  };

  std::atomic<const TThreadedServer*> server_{nullptr};
  std::shared_ptr<std::mutex> sockets_mu_ = std::make_shared<std::mutex>();
  std::vector<std::weak_ptr<TSocket>> sockets_;  // guarded by *sockets_mu_
};

namespace {

// How long the threaded engine waits after accept() itself failed (out of
// descriptors or memory) before it tries again.
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

// Accepts connections, wraps them in TLS, and closes at once those over the
// connection limit (instead of letting them queue unseen in the kernel's
// backlog).
class GuardedServerSocket : public TServerSocket {
 public:
  GuardedServerSocket(const std::string& host, int port, std::shared_ptr<RpcGuard> guard,
                      std::shared_ptr<RpcServer::ThreadedConnections> connections,
                      std::shared_ptr<const RpcTlsContext> tls)
      : TServerSocket(host, port),
        guard_(std::move(guard)),
        connections_(std::move(connections)),
        tls_(std::move(tls)) {
    // An interruptible child polls Thrift's interrupt pipe before every
    // read: one more system call per request. RpcServer::Stop wakes the
    // children by shutting their sockets down instead.
    setInterruptableChildren(false);
  }

 protected:
  std::shared_ptr<TTransport> acceptImpl() override {
    for (;;) {
      std::shared_ptr<TTransport> client;
      try {
        client = TServerSocket::acceptImpl();
      } catch (const TTransportException& e) {
        // accept() itself failed (EMFILE, ENFILE, ENOMEM, ...). Thrift's
        // serve() stops listening for good on any error but a timeout, so
        // this waits a little (the connection stays in the backlog) and
        // reports one: serve() calls again.
        if (e.getType() != TTransportException::UNKNOWN) throw;
        MC_LOG_WARN("rpc accept failed port={} error=\"{}\"; accepting again in {} ms", getPort(),
                    e.what(), kAcceptRetryDelay.count());
        std::this_thread::sleep_for(kAcceptRetryDelay);
        throw TTransportException(TTransportException::TIMED_OUT, e.what());
      }
      if (guard_->Admit(connections_->active())) return client;
      client->close();
    }
  }

  std::shared_ptr<TSocket> createSocket(THRIFT_SOCKET fd) override {
    auto socket = tls_ ? tls_->factory().createSocket(fd) : connections_->NewPlainSocket(fd);
    connections_->Track(socket);
    return socket;
  }

 private:
  std::shared_ptr<RpcGuard> guard_;
  std::shared_ptr<RpcServer::ThreadedConnections> connections_;
  std::shared_ptr<const RpcTlsContext> tls_;
};

class BoundedTransportFactory : public TTransportFactory {
 public:
  explicit BoundedTransportFactory(RpcReadTimeouts timeouts) : timeouts_(timeouts) {}

  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> client) override {
    auto socket = std::dynamic_pointer_cast<TSocket>(client);
    if (!socket) throw std::logic_error("RpcServer accepted a transport that is not a socket");
    // A TLS session sends through Thrift's socket, whose send timeout bounds
    // each wait for a peer that stops reading (plain TCP sends within one
    // deadline for the whole frame: BoundedFramedTransport::flush).
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
  GuardedProcessor(std::shared_ptr<TProcessor> inner, std::shared_ptr<RpcGuard> guard)
      : inner_(std::move(inner)), guard_(std::move(guard)) {}

  bool process(std::shared_ptr<TProtocol> in, std::shared_ptr<TProtocol> out,
               void* context) override {
    try {
      return inner_->process(in, out, context);
    } catch (const std::exception& e) {
      if (auto fault = ClassifyRpcException(e)) {
        auto* transport = dynamic_cast<const BoundedFramedTransport*>(in->getTransport().get());
        guard_->Record(*fault, transport ? transport->peer() : "unknown", e.what());
      }
      return false;
    }
  }

 private:
  std::shared_ptr<TProcessor> inner_;
  std::shared_ptr<RpcGuard> guard_;
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
  if (options.limits.poll_us > 0 && !SpareCpuUnavailableReason().empty()) {
    MC_LOG_INFO("rpc polling off reason=\"{}\"", SpareCpuUnavailableReason());
  }
  std::unique_ptr<RpcServer> result(new RpcServer());
  result->guard_ = std::make_shared<RpcGuard>(options.limits, options.port);
  if (*tls || options.limits.engine == RpcEngine::kThreads) {
    auto guarded = std::make_shared<GuardedProcessor>(std::move(processor), result->guard_);
    if (auto started = result->StartThreaded(std::move(guarded), options, *tls); !started) {
      return Err(started.error());
    }
  } else {
    // The event engine guards its processor calls itself.
    auto server = RpcEventServer::Start(std::move(processor), options, result->guard_);
    if (!server) return Err(server.error());
    result->event_server_ = std::move(*server);
    result->port_ = result->event_server_->port();
  }
  result->guard_->SetPort(result->port_);
  return result;
}

Result<void> RpcServer::StartThreaded(std::shared_ptr<TProcessor> processor,
                                      const RpcServerOptions& options,
                                      std::shared_ptr<const RpcTlsContext> tls) {
  threaded_ = std::make_shared<ThreadedConnections>();
  auto socket = std::make_shared<GuardedServerSocket>(options.host, options.port, guard_, threaded_,
                                                      std::move(tls));
  auto server = std::make_shared<TThreadedServer>(
      std::move(processor), socket, std::make_shared<BoundedTransportFactory>(guard_->timeouts()),
      std::make_shared<BoundedProtocolFactory>());
  threaded_->WatchServer(server.get());
  auto ready = std::make_shared<ReadySignal>();
  server->setServerEventHandler(ready);
  auto ready_future = ready->future();

  server_ = server;
  served_ = std::make_shared<std::atomic<bool>>(false);
  thread_ =
      std::thread([server, ready, served = served_, host = options.host, port = options.port] {
        try {
          server->serve();
        } catch (const std::exception& e) {
          MC_LOG_ERROR("rpc serve failed host={} port={} error=\"{}\"", host, port, e.what());
          ready->Fail();
        }
        served->store(true);
      });
  if (!ready_future.get()) {
    thread_.join();
    server_.reset();
    threaded_->WatchServer(nullptr);
    return Err(ErrorCode::kRpcFail);
  }
  port_ = socket->getPort();
  return {};
}

RpcServer::~RpcServer() { Stop(); }

RpcServerStats RpcServer::stats() const {
  if (!guard_) return RpcServerStats{};
  int64_t active =
      event_server_ ? event_server_->active_connections() : (threaded_ ? threaded_->active() : 0);
  RpcServerStats stats = guard_->Snapshot(active);
  stats.polls = ReadRpcPollCounts();
  return stats;
}

void RpcServer::Stop() {
  if (event_server_) event_server_->Stop();
  if (server_) server_->stop();
  if (thread_.joinable()) {
    // serve() returns once every connection has closed. Shutting them down
    // again each round also catches one accepted just as stop() began.
    while (!served_->load()) {
      threaded_->ShutdownAll();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    thread_.join();
  }
  if (threaded_) threaded_->WatchServer(nullptr);
  server_.reset();
}

}  // namespace mooncake
