#include "master/master_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/config_file.h"
#include "common/etcd_client.h"
#include "common/file_read.h"
#include "common/flag_parsing.h"
#include "common/version.h"
#include "http/admin_settings.h"
#include "thrift/rpc_settings.h"

namespace mooncake {
namespace {

// Every level SetLogLevel accepts.
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

void SetMessage(std::string* message, std::string text) {
  if (message) *message = std::move(text);
}

void AddOptions(CLI::App& app, MasterConfig& config) {
  app.add_option("--host", config.host, "Address to bind the Thrift service to")
      ->capture_default_str();
  app.add_option("--port", config.port, "TCP port (0 picks a free port)")->capture_default_str();
  app.add_option("--node-ttl-ms", config.node_ttl_ms,
                 "A worker silent this long is declared dead and its keys dropped")
      ->capture_default_str();
  app.add_option("--dead-node-forget-ms", config.dead_node_forget_ms,
                 "A node dead this long leaves /nodes and /readyz (0: listed until it "
                 "registers again or DELETE /nodes/{id})")
      ->capture_default_str();
  app.add_option("--ready-file", config.ready_file,
                 "Once listening, write two lines to this file (atomically): the bound RPC "
                 "port, then the bound admin port (-1 if disabled)");
  app.add_option("--log-level", config.log_level,
                 "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.add_option("--etcd", config.etcd,
                 "High availability: etcd endpoints http://HOST:PORT[,...]; masters of one "
                 "--cluster-name elect a leader there (docs/ha.md)");
  app.add_option("--cluster-name", config.cluster_name, "HA group name in etcd")
      ->capture_default_str();
  app.add_option("--advertise-address", config.advertise_address,
                 "HOST:PORT published in etcd as this master's address (default: --host and "
                 "the bound port)");
  app.add_option("--etcd-lease-ttl-s", config.etcd_lease_ttl_s,
                 "TTL of the leader's etcd lease in seconds")
      ->capture_default_str();
  app.add_option("--rebuild-ms,--ha-rebuild-ms", config.rebuild_ms,
                 "After a start (and each won election) key calls answer NOT_LEADER, so callers "
                 "wait, this long while workers re-announce their keys; must exceed their "
                 "heartbeat interval")
      ->capture_default_str();
  AddAdminOptions(
      app, {config.admin_host, config.admin_port, config.admin_token, config.admin_token_file});
  AddRpcServerOptions(app, config.rpc_limits);
  AddTlsOptions(app, config.tls);
  app.set_config("--config", "", "Read these options from a TOML/INI file (same key names)")
      ->type_name("FILE");
  // Quoted values keep a '#' (common/config_file.h).
  UseConfigFileFormat(app);
  // A misspelt key in a config file should fail loudly, not be ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", VersionLine("mooncake-master"),
                       "Print the version, git commit, build type and compiled-in GPU/RDMA "
                       "support, then exit");
}

// Checks of the admin server's settings; empty when they are fine.
std::string AdminConfigProblem(const MasterConfig& config) {
  return AdminSettingsProblem(config.admin_host, config.admin_port, config.port,
                              config.admin_token);
}

// "HOST:PORT" with a non-empty host and a port of 1..65535 in digits only.
bool IsHostPort(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = 0;
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, port);
  return ec == std::errc() && ptr == end && port >= 1 && port <= 65535;
}

// Checks of the HA settings; empty when they are fine.
std::string HaConfigProblem(const MasterConfig& config) {
  if (config.cluster_name.empty() || config.cluster_name.find('/') != std::string::npos) {
    return "--cluster-name must be non-empty and hold no '/', got \"" + config.cluster_name + "\"";
  }
  if (config.etcd_lease_ttl_s < 1 || config.etcd_lease_ttl_s > 60) {
    return "--etcd-lease-ttl-s must be in 1..60, got " + std::to_string(config.etcd_lease_ttl_s);
  }
  if (config.rebuild_ms < 0 || config.rebuild_ms > 60000) {
    return "--rebuild-ms must be in 0..60000, got " + std::to_string(config.rebuild_ms);
  }
  if (!config.advertise_address.empty() && !IsHostPort(config.advertise_address)) {
    return "--advertise-address must be HOST:PORT with a port in 1..65535, got \"" +
           config.advertise_address + "\"";
  }
  if (config.etcd.empty()) return "";
  if (!ParseEtcdEndpoints(config.etcd)) {
    return "--etcd must be http://HOST:PORT[,http://HOST:PORT...], got \"" + config.etcd + "\"";
  }
  if (config.advertise_address.empty() && (config.host == "0.0.0.0" || config.host == "::")) {
    return "--etcd with a wildcard --host needs --advertise-address HOST:PORT";
  }
  return "";
}

}  // namespace

int EffectiveAdminPort(const MasterConfig& config) {
  return EffectiveAdminPort(config.port, config.admin_port, kDefaultAdminPort);
}

Result<void> LoadAdminToken(MasterConfig& config, std::string* message) {
  if (!config.admin_token.empty() || config.admin_token_file.empty()) return {};
  // Read with a bound: `--admin-token-file /dev/zero` is a config error.
  auto token = ReadAdminTokenFile(config.admin_token_file);
  if (!token) {
    SetMessage(message, token.error());
    return Err(ErrorCode::kInvalidParams);
  }
  config.admin_token = std::move(*token);
  return {};
}

Result<void> ValidateMasterConfig(const MasterConfig& config, std::string* message) {
  if (config.host.empty()) {
    SetMessage(message, "--host must not be empty");
  } else if (config.port < 0 || config.port > 65535) {
    SetMessage(message, "--port must be in 0..65535, got " + std::to_string(config.port));
  } else if (config.node_ttl_ms <= 0 || config.node_ttl_ms > kMaxNodeTtlMs) {
    // Bounded: the reaper compares in nanoseconds, where a larger TTL
    // overflows and declares every node dead on every pass.
    SetMessage(message, "--node-ttl-ms must be in 1.." + std::to_string(kMaxNodeTtlMs) +
                            " (24 h), got " + std::to_string(config.node_ttl_ms));
  } else if (config.dead_node_forget_ms < 0 || config.dead_node_forget_ms > kMaxDeadNodeForgetMs) {
    SetMessage(message, "--dead-node-forget-ms must be in 0.." +
                            std::to_string(kMaxDeadNodeForgetMs) + " (30 days), got " +
                            std::to_string(config.dead_node_forget_ms));
  } else if (std::ranges::find(kLogLevels, config.log_level) == kLogLevels.end()) {
    SetMessage(message,
               "--log-level must be one of trace, debug, info, warn, error, critical, "
               "off; got \"" +
                   config.log_level + "\"");
  } else if (auto problem = HaConfigProblem(config); !problem.empty()) {
    SetMessage(message, std::move(problem));
  } else if (auto problem = AdminConfigProblem(config); !problem.empty()) {
    SetMessage(message, std::move(problem));
  } else if (auto limits = ValidateRpcServerLimits(config.rpc_limits, message); !limits) {
    return limits;
  } else {
    return ValidateTlsSettings(config.tls, message);
  }
  return Err(ErrorCode::kInvalidParams);
}

Result<MasterConfig> ParseMasterConfig(int argc, const char* const* argv, std::string* message) {
  MasterConfig config;
  CLI::App app("mooncake-master: key -> node directory of the tiered cache", "mooncake-master");
  AddOptions(app, config);
  bool help = false;
  if (auto parsed = ParseFlags(app, argc, argv, &help, message); !parsed)
    return Err(parsed.error());
  if (help) {
    MasterConfig shown;
    shown.show_help = true;
    return shown;
  }
  if (auto loaded = LoadAdminToken(config, message); !loaded) return Err(loaded.error());
  if (auto valid = ValidateMasterConfig(config, message); !valid) return Err(valid.error());
  return config;
}

}  // namespace mooncake
