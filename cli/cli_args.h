#pragma once

// The pure half of mooncake-cli: command-line arguments to a CliCommand, exit
// codes, error lines and size formatting. Nothing here does I/O or talks to
// the cluster, so unit tests cover it without a running server. CLI11 stays
// inside cli_args.cc.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "thrift/rpc_tls.h"

namespace mooncake::cli {

// Exit codes of docs/design.md, "Interfaces and exit codes"; scripts rely
// on them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotFound = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitServer = 3;

inline constexpr std::string_view kDefaultMaster = "127.0.0.1:50051";
// Transfers above this size show a progress bar when stderr is a terminal.
inline constexpr uint64_t kProgressThresholdBytes = 8ull << 20;

enum class CommandKind { kPut, kUpsert, kGet, kExist, kRemove, kInspect, kLocate, kStats, kNodes };
enum class ValueSource { kArgument, kFile, kStdin };

// One parsed invocation. Plain data; the runner owns what it does.
struct CliCommand {
  CommandKind kind = CommandKind::kNodes;
  std::string master_host;
  int master_port = 0;
  // Master HA (docs/ha.md): etcd endpoints; when non-empty the leader of
  // cluster_name is found there and master_host/master_port are unused.
  std::string etcd;
  std::string cluster_name = "mooncake";
  // A sharded master directory (docs/sharding.md): a slot table or an
  // address list; when non-empty master_host/master_port are unused.
  std::string master_shards;
  std::string node;  // --node: local node, put target, stats node
  bool json = false;
  std::string key;
  ValueSource source = ValueSource::kArgument;
  std::string value;  // put/upsert with kArgument
  std::string path;   // put/upsert --file input; get -o output (empty: stdout)
  bool hard_pin = false;
  bool soft_pin = false;
  int64_t soft_pin_ttl_ms = 0;  // 0: the worker's default
  std::string tier;             // put/upsert --tier: "vram", "dram", "ssd" or empty
  bool zero_copy = false;       // put/upsert --zero-copy: a plan-based write
  bool prefetch = false;        // exist --prefetch
  bool force = false;
  // --tls-cert/--tls-key/--tls-ca, else the config file's tls-cert, tls-key
  // and tls-ca keys; empty: plain TCP.
  TlsSettings tls;
};

// Where the master address may come from besides --master. Precedence:
// --master flag > MOONCAKE_MASTER > config file > kDefaultMaster; --node,
// --json and the TLS flags likewise win over the file's keys (--json=false
// and --node "" included). The config
// file is --config FILE (must be readable) or else `default_config_path`
// (~/.config/mooncake/cli.toml; skipped when absent). It is TOML with the
// keys of CliFileConfig; an unknown key, a [section] or a line that is not
// `key = value` is a usage error naming it.
// etcd (--etcd, MOONCAKE_ETCD, or the file's etcd key, in that order) and a
// shard list (--master-shards, MOONCAKE_MASTER_SHARDS, the file's
// master-shards key) are used instead of a master address. The three are one
// setting, where the master is: the highest source (flag > environment >
// file) that gives any of them decides, and what a lower source gives is
// ignored (MOONCAKE_MASTER beats the file's etcd key); within one source,
// etcd or shards win over master, and etcd with shards is a usage error, as
// are --master and --etcd together. The master address is checked only when
// it is used. --cluster-name wins over the file's cluster-name key (default
// "mooncake").
struct CliEnvironment {
  const char* env_master = nullptr;
  const char* env_etcd = nullptr;
  // MOONCAKE_MASTER_SHARDS: like --master-shards, below it and above the
  // file's keys; unused when --master or --etcd is given.
  const char* env_master_shards = nullptr;
  std::string default_config_path;
  // Reads a whole file; nullopt when it cannot be read. Null: no file is read.
  std::function<std::optional<std::string>(const std::string& path)> read_file;
};

// What parsing produced: a command to run, or text to print and an exit code
// (help and --version are exit 0, usage errors exit 2). A usage error always
// has its human line in `err`; with --json among the arguments (or json =
// true in the config file, which is read for this even when the arguments
// are too wrong to parse) `out` also holds UsageJson(...) for stdout.
struct ParseOutcome {
  std::optional<CliCommand> command;
  int exit_code = kExitOk;
  std::string out;  // for stdout (help, --version, a usage error's JSON)
  std::string err;  // for stderr (usage errors)
};

// Parses arguments without the program name. `env_master` is the value of
// MOONCAKE_MASTER or null; --master overrides it. No config file is read.
ParseOutcome ParseCli(const std::vector<std::string>& args, const char* env_master);
ParseOutcome ParseCli(const std::vector<std::string>& args, const CliEnvironment& env);

// The keys a cli.toml may hold; each is absent unless the file sets it.
struct CliFileConfig {
  std::optional<std::string> master;  // master = "host:port"
  std::optional<std::string> node;    // node = "worker-1"
  std::optional<bool> json;           // json = true
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_ca;
  std::optional<std::string> etcd;          // etcd = "http://host:2379,..."
  std::optional<std::string> cluster_name;  // cluster-name = "mooncake"
  // master-shards = "0-8191=host:port,8192-16383=host:port"
  std::optional<std::string> master_shards;
};

// Parses a cli.toml text (CLI11's TOML reader). nullopt, with `*problem`
// set (e.g. "unknown key 'mastr'"), when the text is not such a file.
std::optional<CliFileConfig> ParseCliConfig(std::string_view text, std::string* problem);

// "HOST:PORT", "etcd ENDPOINTS cluster NAME" or "shards TABLE", for messages.
std::string MasterLabel(const CliCommand& command);

// The --json answer to a usage error: {"ok":false,"error":MESSAGE,"code":"USAGE"}.
std::string UsageJson(std::string_view message);

// "HOST:PORT" or "[V6]:PORT" -> (host, port); nullopt when malformed.
std::optional<std::pair<std::string, int>> ParseHostPort(std::string_view text);

// Human-readable binary size: "512 B", "4.0 KiB", "3.0 GiB".
using ::mooncake::FormatBytes;

// The process exit code for a failed call.
int ExitCodeFor(ErrorCode code);

// What the user should know about a failed call.
struct ErrorContext {
  std::string key;
  std::string node;
  std::string master;
  std::optional<uint64_t> size;
  bool connecting = false;  // the failure happened reaching the master
  // What this process found out itself, said instead of the code's usual
  // meaning (e.g. which TLS file cannot be used, and why); empty if nothing.
  std::string why;
};

// One line (no newline), e.g. "error: put failed: NO_AVAILABLE_HANDLE (-200):
// no tier on the target node can hold 3.0 GiB".
std::string ErrorLine(std::string_view action, ErrorCode code, const ErrorContext& context);

}  // namespace mooncake::cli
