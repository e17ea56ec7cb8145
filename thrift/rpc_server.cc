#include "thrift/rpc_server.h"

#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TServer.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include "common/log.h"

namespace mooncake {
namespace {

using apache::thrift::TProcessor;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TServerEventHandler;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TFramedTransportFactory;
using apache::thrift::transport::TServerSocket;

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

void RouteThriftLogs() {
  static std::once_flag once;
  std::call_once(once, [] {
    apache::thrift::GlobalOutput.setOutputFunction(
        [](const char* msg) { MC_LOG_DEBUG("thrift msg=\"{}\"", msg); });
  });
}

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Start(std::shared_ptr<TProcessor> processor,
                                                    const std::string& host, int port) {
  RouteThriftLogs();
  auto socket = std::make_shared<TServerSocket>(host, port);
  auto server = std::make_shared<TThreadedServer>(processor, socket,
                                                  std::make_shared<TFramedTransportFactory>(),
                                                  std::make_shared<TBinaryProtocolFactory>());
  auto ready = std::make_shared<ReadySignal>();
  server->setServerEventHandler(ready);
  auto ready_future = ready->future();

  std::unique_ptr<RpcServer> result(new RpcServer());
  result->server_ = server;
  result->thread_ = std::thread([server, ready, host, port] {
    try {
      server->serve();
    } catch (const std::exception& e) {
      MC_LOG_ERROR("rpc serve failed host={} port={} error=\"{}\"", host, port, e.what());
      ready->Fail();
    }
  });
  if (!ready_future.get()) {
    result->thread_.join();
    result->server_.reset();
    return Err(ErrorCode::kRpcFail);
  }
  result->port_ = socket->getPort();
  return result;
}

RpcServer::~RpcServer() { Stop(); }

void RpcServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

Result<void> WriteReadyFile(const std::string& path, int port) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Err(ErrorCode::kInvalidParams);
    out << port << "\n";
    if (!out.flush()) return Err(ErrorCode::kInternalError);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Err(ErrorCode::kInternalError);
  return {};
}

}  // namespace mooncake
