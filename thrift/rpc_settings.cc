#include "thrift/rpc_settings.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <map>

namespace mooncake {
namespace {

Result<void> Fail(std::string* message, std::string why) {
  if (message) *message = std::move(why);
  return Err(ErrorCode::kInvalidParams);
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

void AddRpcServerOptions(CLI::App& app, RpcServerLimits& limits) {
  app.add_option("--max-connections", limits.max_connections,
                 "RPC connections served at once; more are closed at once and counted")
      ->capture_default_str();
  app.add_option("--rpc-idle-timeout-ms", limits.idle_timeout_ms,
                 "Close an RPC connection that sends nothing for this long")
      ->capture_default_str();
  app.add_option("--rpc-read-timeout-ms", limits.read_timeout_ms,
                 "Close an RPC connection whose started request does not arrive whole "
                 "within this")
      ->capture_default_str();
  app.add_option("--rpc-poll-us", limits.poll_us,
                 "Poll an RPC connection this long for the next request (and this process's "
                 "calls for their replies) before sleeping, only while a CPU is spare and no "
                 "cgroup CPU quota applies; 0 off. Plain TCP with --rpc-engine threads")
      ->capture_default_str();
  // A set of names rather than a map to the enum: CLI11 prints the map's
  // values (which have no names) in --help and in its error.
  app.add_option_function<std::string>(
         "--rpc-engine",
         [&limits](const std::string& name) {
           limits.engine = name == "epoll" ? RpcEngine::kEpoll : RpcEngine::kThreads;
         },
         "How plain-TCP RPC connections are served: 'threads' (one thread each, the "
         "lowest tail latency) or 'epoll' (threads only for calls in progress; for "
         "thousands of mostly idle connections). TLS connections always use threads")
      ->transform(CLI::IsMember({"threads", "epoll"}, CLI::ignore_case))
      ->default_str("threads");
}

void AddTlsOptions(CLI::App& app, TlsSettings& tls) {
  app.add_option("--tls-cert", tls.cert_file,
                 "PEM certificate for mutual TLS on every RPC connection (with --tls-key, "
                 "--tls-ca; off when unset)")
      ->type_name("FILE");
  app.add_option("--tls-key", tls.key_file, "PEM private key of --tls-cert")->type_name("FILE");
  app.add_option("--tls-ca", tls.ca_file,
                 "PEM CA certificate; peers must present a certificate it signed")
      ->type_name("FILE");
}

Result<void> ValidateRpcServerLimits(const RpcServerLimits& limits, std::string* message) {
  if (limits.max_connections < 1) {
    return Fail(message, "--max-connections must be at least 1, got " +
                             std::to_string(limits.max_connections));
  }
  if (limits.idle_timeout_ms < 1) {
    return Fail(message, "--rpc-idle-timeout-ms must be at least 1, got " +
                             std::to_string(limits.idle_timeout_ms));
  }
  if (limits.read_timeout_ms < 1) {
    return Fail(message, "--rpc-read-timeout-ms must be at least 1, got " +
                             std::to_string(limits.read_timeout_ms));
  }
  if (limits.poll_us < 0 || limits.poll_us > kMaxRpcPollUs) {
    return Fail(message, "--rpc-poll-us must be within 0.." + std::to_string(kMaxRpcPollUs) +
                             ", got " + std::to_string(limits.poll_us));
  }
  return {};
}

Result<void> ValidateTlsSettings(const TlsSettings& tls, std::string* message) {
  if (!tls.enabled()) return {};
  if (tls.cert_file.empty() || tls.key_file.empty() || tls.ca_file.empty()) {
    return Fail(message, "TLS needs all three of --tls-cert, --tls-key and --tls-ca");
  }
  for (const auto* path : {&tls.cert_file, &tls.key_file, &tls.ca_file}) {
    if (!Readable(*path)) return Fail(message, "cannot read TLS file " + *path);
  }
  return {};
}

}  // namespace mooncake
