#pragma once

// A pool of Thrift connections to one server. Thrift clients are not
// thread-safe, so each call borrows a connection, and returns it when the call
// succeeded. Transport failures become ErrorCode values here: no Thrift
// exception crosses this boundary.
//
// Thread-safety: Call() is safe from any number of threads.

#include <thrift/TApplicationException.h>
#include <thrift/transport/TTransportException.h>

#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

// The code a client call gets for the exception that ended it: kRpcTimeout
// when a reply did not come (or not whole) in time, else kRpcFail.
inline ErrorCode RpcCallFailure(const std::exception& e) {
  auto fault = ClassifyRpcException(e);
  bool timed_out = fault == RpcFault::kSlowFrame || fault == RpcFault::kIdleTimeout ||
                   fault == RpcFault::kSlowReader;
  return timed_out ? ErrorCode::kRpcTimeout : ErrorCode::kRpcFail;
}

template <typename ClientT>
class RpcChannel {
 public:
  RpcChannel(std::string host, int port, RpcOptions options = {})
      : host_(std::move(host)), port_(port), options_(options) {}

  RpcChannel(const RpcChannel&) = delete;
  RpcChannel& operator=(const RpcChannel&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

  // Runs fn(ClientT&) on a pooled connection. A call on a reused connection
  // that fails in transport is retried once on a fresh one: the server may
  // have restarted since the connection was pooled.
  template <typename Fn>
  auto Call(Fn&& fn) -> Result<std::invoke_result_t<Fn&, ClientT&>> {
    auto [conn, reused] = Borrow();
    auto result = Invoke(conn, fn);
    if (!result && result.error() == ErrorCode::kRpcFail && reused) {
      conn.reset();
      std::tie(conn, reused) = Fresh();
      result = Invoke(conn, fn);
    }
    if (result && conn) Return(std::move(conn));
    return result;
  }

 private:
  struct Connection {
    std::shared_ptr<apache::thrift::transport::TTransport> transport;
    std::unique_ptr<ClientT> client;
  };
  using ConnectionPtr = std::unique_ptr<Connection>;

  std::pair<ConnectionPtr, bool> Borrow() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        ConnectionPtr conn = std::move(idle_.back());
        idle_.pop_back();
        return {std::move(conn), true};
      }
    }
    return Fresh();
  }

  std::pair<ConnectionPtr, bool> Fresh() {
    try {
      auto transport = OpenClientTransport(host_, port_, options_);
      auto conn = std::make_unique<Connection>();
      conn->transport = transport;
      conn->client = std::make_unique<ClientT>(std::make_shared<BoundedBinaryProtocol>(transport));
      return {std::move(conn), false};
    } catch (const std::exception& e) {
      MC_LOG_DEBUG("rpc connect failed host={} port={} error=\"{}\"", host_, port_, e.what());
      return {nullptr, false};
    }
  }

  template <typename Fn>
  auto Invoke(ConnectionPtr& conn, Fn& fn) -> Result<std::invoke_result_t<Fn&, ClientT&>> {
    if (!conn) return Err(ErrorCode::kRpcFail);
    try {
      if constexpr (std::is_void_v<std::invoke_result_t<Fn&, ClientT&>>) {
        fn(*conn->client);
        return {};
      } else {
        return fn(*conn->client);
      }
    } catch (const std::exception& e) {
      // A reply that broke a limit, a transport failure, a TLS refusal: the
      // connection is unusable either way, and nothing was allocated for the
      // reply beyond what its frame carried.
      conn.reset();
      MC_LOG_DEBUG("rpc failed host={} port={} error=\"{}\"", host_, port_, e.what());
      return Err(RpcCallFailure(e));
    }
  }

  void Return(ConnectionPtr conn) {
    std::lock_guard lock(mu_);
    if (idle_.size() < options_.max_idle) idle_.push_back(std::move(conn));
  }

  const std::string host_;
  const int port_;
  const RpcOptions options_;
  std::mutex mu_;
  std::vector<ConnectionPtr> idle_;  // guarded by mu_
};

}  // namespace mooncake
