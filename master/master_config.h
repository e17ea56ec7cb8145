#pragma once

// The master's settings, filled from flags and an optional config file in one
// place (ParseMasterConfig). Every field has a working default, so
// `mooncake-master` with no flags serves on 127.0.0.1:50051.
//
// Thread-safety: a plain value; ParseMasterConfig is reentrant.

#include <cstdint>
#include <string>

#include "common/status.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_tls.h"

namespace mooncake {

inline constexpr int kDefaultAdminPort = 50050;

// The master's --rpc-poll-us, longer than a worker's or a client's
// (kDefaultRpcPollUs). Its callers are workers claiming the keys of their
// puts: a put is not answered until its claim is, and one worker's claims
// come every 50-300 us (a put's or a batch's time), so a master thread that
// slept after 30 us paid a wake-up (tens of us on a virtual machine) on
// nearly every claim. It polls only while a CPU is spare.
inline constexpr int kDefaultMasterRpcPollUs = 200;

inline constexpr int64_t kMaxNodeTtlMs = 24ll * 3600 * 1000;
inline constexpr int64_t kMaxDeadNodeForgetMs = 30ll * 24 * 3600 * 1000;

struct MasterConfig {
  // Address the Thrift service binds to.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (see --ready-file).
  int port = 50051;
  // Connection limits of the Thrift service.
  RpcServerLimits rpc_limits{.poll_us = kDefaultMasterRpcPollUs};
  // Mutual TLS on the Thrift service; off when empty.
  TlsSettings tls;
  // A worker silent for this long is declared dead and its keys dropped.
  int64_t node_ttl_ms = 10000;  // 1..kMaxNodeTtlMs
  // A node dead this long leaves the registry (/nodes, /readyz, node_up);
  // 0 keeps dead nodes listed until they register again or an operator
  // forgets them (DELETE /nodes/{id}).
  int64_t dead_node_forget_ms = 3600 * 1000;  // 0..kMaxDeadNodeForgetMs
  // If set, written once the master listens: two lines, the bound RPC port
  // and the bound admin port (-1 when the admin server is disabled).
  std::string ready_file;
  // Address of the REST admin server (health, nodes, keys, metrics).
  std::string admin_host = "127.0.0.1";
  // Admin TCP port; 0 picks a free one, -1 disables the admin server. Left
  // at the default while `port` is 0, the admin server picks a free port too
  // (see EffectiveAdminPort): masters on free ports, as in tests and local
  // clusters, must not collide on 50050.
  int admin_port = kDefaultAdminPort;
  // Bearer token that mutating admin requests must carry; empty: no check.
  // Read endpoints stay open either way.
  std::string admin_token;
  // A file holding the token (surrounding whitespace trimmed), so it need
  // not appear in the process list. admin_token, if set, wins.
  std::string admin_token_file;
  // trace, debug, info, warn, error, critical or off.
  std::string log_level = "info";

  // High availability (docs/ha.md). Empty `etcd`: one master, as always.
  // Otherwise comma-separated etcd endpoints (http://HOST:PORT): masters of
  // one `cluster_name` elect a leader there; the others stand by.
  std::string etcd;
  std::string cluster_name = "mooncake";
  // HOST:PORT published as the leader's address; empty: --host and the
  // bound port (a wildcard --host needs an explicit address).
  std::string advertise_address;
  // TTL of the leader's etcd lease: a dead leader is replaced after at most
  // about this long (etcd's minimum is 2 s).
  int64_t etcd_lease_ttl_s = 3;
  // After starting, and with `etcd` after each won election, key calls
  // and PickNode are answered NOT_LEADER (callers wait and retry) for this
  // long while the workers re-register and re-announce their keys: the
  // directory starts empty, so until then a get would hear "not found", a
  // remove would be undone and a put would overwrite. Must exceed the
  // workers' heartbeat interval. 0: serve at once (only where no worker can
  // hold keys from before this master started). --rebuild-ms; the old name
  // --ha-rebuild-ms still works.
  int64_t rebuild_ms = 2500;

  // Set by ParseMasterConfig when --help was given: `message` then holds the
  // help text, the other fields are defaults, and the caller should print it
  // to stdout and exit 0 without starting anything.
  bool show_help = false;
};

// Checks ranges: port in 0..65535, admin_port in -1..65535 and not equal to
// port, node_ttl_ms > 0, a known log level, parseable etcd endpoints, a
// cluster name without '/', a lease TTL of 1..60 s, a rebuild window of
// 0..60000 ms, an advertise address of HOST:PORT (port 1..65535), a token of visible ASCII without
// spaces, positive RPC limits, and all three TLS files or none. On failure returns kInvalidParams
// and, if `message` is given, says why.
Result<void> ValidateMasterConfig(const MasterConfig& config, std::string* message);

// The admin port to bind: 0 when `port` is 0 and admin_port is the default,
// else admin_port (-1: no admin server).
int EffectiveAdminPort(const MasterConfig& config);

// Fills admin_token from admin_token_file when the token is empty and a file
// is named. kInvalidParams (with the reason) if the file cannot be read,
// holds more than kMaxTokenFileBytes (4 KiB, common/file_read.h) or only
// whitespace: a missing secret must not silently disable auth.
Result<void> LoadAdminToken(MasterConfig& config, std::string* message);

// Parses command-line flags --host --port --node-ttl-ms --ready-file
// --log-level --admin-host --admin-port --admin-token --admin-token-file
// --max-connections --rpc-idle-timeout-ms --rpc-read-timeout-ms --tls-cert
// --tls-key --tls-ca --etcd --cluster-name --advertise-address
// --etcd-lease-ttl-s --rebuild-ms (alias --ha-rebuild-ms) and --config FILE (TOML/INI, same key
// names as the flags; flags given on the command line win over the file). On a parse or validation
// error returns kInvalidParams with the reason in `*message`; on --help returns a config with
// show_help set and the help text in `*message`. `message` may be null.
Result<MasterConfig> ParseMasterConfig(int argc, const char* const* argv, std::string* message);

}  // namespace mooncake
