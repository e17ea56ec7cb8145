#pragma once

// A Thrift server on one TCP port, framed transport and binary protocol,
// one thread per connection. Malformed frames close only their connection.
//
// Thread-safety: Start/Stop from one owning thread; port() from any.

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace apache::thrift {
class TProcessor;
namespace server {
class TThreadedServer;
}
}  // namespace apache::thrift

namespace mooncake {

class RpcServer {
 public:
  // Binds host:port (port 0 picks a free port) and serves in a background
  // thread. Returns once the socket listens, or kRpcFail if it cannot bind.
  static Result<std::unique_ptr<RpcServer>> Start(
      std::shared_ptr<apache::thrift::TProcessor> processor, const std::string& host, int port);

  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // The bound port (useful when started with port 0).
  int port() const { return port_; }
  // Stops accepting, closes connections and joins the serving thread.
  void Stop();

 private:
  RpcServer() = default;

  std::shared_ptr<apache::thrift::server::TThreadedServer> server_;
  std::thread thread_;
  int port_ = 0;
};

// Writes `port` to `path` atomically (write + rename), so a process that polls
// for the file never reads a partial number. Used by --ready-file.
Result<void> WriteReadyFile(const std::string& path, int port);

}  // namespace mooncake
