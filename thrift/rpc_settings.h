#pragma once

// The RPC flags every binary shares, with one spelling, help text and check:
// --max-connections, --rpc-idle-timeout-ms, --rpc-read-timeout-ms,
// --rpc-poll-us, --rpc-engine (servers)
// and --tls-cert, --tls-key, --tls-ca (servers and clients). Config files
// use the same key names.
//
// Thread-safety: pure functions.

#include <string>

#include "common/status.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_tls.h"

namespace CLI {
class App;
}

namespace mooncake {

// Registers the server limit flags on `app`, bound to `limits`.
void AddRpcServerOptions(CLI::App& app, RpcServerLimits& limits);
// Registers --tls-cert, --tls-key and --tls-ca on `app`, bound to `tls`.
void AddTlsOptions(CLI::App& app, TlsSettings& tls);

// max_connections >= 1, both timeouts >= 1 ms and poll_us within
// 0..kMaxRpcPollUs. kInvalidParams with the
// reason in `*message` (may be null).
Result<void> ValidateRpcServerLimits(const RpcServerLimits& limits, std::string* message);

}  // namespace mooncake
