#include "worker/worker_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/config_file.h"
#include "common/etcd_client.h"
#include "common/file_read.h"
#include "common/flag_parsing.h"
#include "common/log.h"
#include "common/units.h"
#include "common/version.h"
#include "http/admin_settings.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shard_list.h"
#include "thrift/rpc_settings.h"
#include "transport/rdma_link.h"
#include "worker/peer_transfer.h"

namespace mooncake {
namespace {

void SetMessage(std::string* message, std::string text) {
  if (message) *message = std::move(text);
}

// A size option that accepts "64MiB" style values.
void AddSizeOption(CLI::App& app, const std::string& name, uint64_t& target,
                   const std::string& help) {
  app.add_option_function<std::string>(
         name,
         [&target, name](const std::string& text) {
           auto bytes = ParseByteSize(text);
           if (!bytes) {
             throw CLI::ValidationError(name, "expected a size like 64MiB, got \"" + text + "\"");
           }
           target = *bytes;
         },
         help + " (default " + FormatByteSize(target) + ")")
      ->type_name("SIZE");
}

void AddOptions(CLI::App& app, WorkerConfig& c) {
  // Environment variables sit below flags and config file keys: CLI11 2.1
  // reads an option's envname only when neither set it. Those of --master,
  // --etcd and --master-shards are read by ResolveMasterAddress instead.
  app.add_option("--node-id", c.node_id, "Cluster-wide node name (default HOST:PORT)")
      ->envname("MOONCAKE_NODE_ID");
  app.add_option("--host", c.host, "Address to bind the Thrift service to")->capture_default_str();
  app.add_option("--advertise-host", c.advertise_host,
                 "Address clients and peers use (default: --host)");
  app.add_option("--port", c.port, "TCP port (0 picks a free port)")->capture_default_str();
  app.add_option("--master", c.master, "Master address HOST:PORT")->capture_default_str();
  app.add_option("--etcd", c.etcd,
                 "Master HA: etcd endpoints http://HOST:PORT[,...]; the leader of "
                 "--cluster-name is found there and followed (instead of --master)");
  app.add_option("--cluster-name", c.cluster_name, "Master HA group name in etcd")
      ->capture_default_str();
  app.add_option("--master-shards", c.master_shards,
                 "Sharded masters: FIRST-LAST=HOST:PORT[,...] or HOST:PORT,HOST:PORT (even "
                 "split); registers with every shard (instead of --master)");
  AddSizeOption(app, "--dram-capacity", c.dram_capacity, "DRAM tier size");
  app.add_flag("--dram-prefault", c.dram_prefault,
               "Populate the whole DRAM arena at startup (before ready): steady put latency "
               "from the first write, for startup time and RSS = --dram-capacity up front; "
               "fails to start if that memory is not free");
  app.add_flag("--dram-pin-for-vram", c.dram_pin_for_vram,
               "With a VRAM tier: pin the DRAM arena for the GPU so DRAM<->VRAM moves are one "
               "DMA each (implies --dram-prefault; the arena stays resident)");
  AddSizeOption(app, "--ssd-capacity", c.ssd_capacity, "SSD tier size, 0 for none");
  AddSizeOption(app, "--vram-capacity", c.vram_capacity,
                "VRAM tier size, 0 for none (needs a HIP build and a GPU)");
  app.add_option("--gpu-device", c.gpu_device, "HIP device index of the VRAM tier")
      ->capture_default_str();
  app.add_option("--ssd-path", c.ssd_path, "RocksDB directory of the SSD tier")
      ->capture_default_str();
  app.add_option("--high-watermark", c.high_watermark, "Demote above this fraction of a tier")
      ->capture_default_str();
  app.add_option("--low-watermark", c.low_watermark, "Demote down to this fraction")
      ->capture_default_str();
  app.add_option("--heartbeat-interval-ms", c.heartbeat_interval_ms, "Heartbeat period")
      ->capture_default_str();
  app.add_option("--promote-on-get", c.promote_on_get, "Promote objects read from lower tiers")
      ->capture_default_str();
  app.add_option("--allow-evict-soft-pinned", c.allow_evict_soft_pinned,
                 "Evict soft-pinned objects after all unpinned ones")
      ->capture_default_str();
  app.add_option("--kv-lease-ttl-ms", c.kv_lease_ttl_ms, "Lease each read grants")
      ->capture_default_str();
  app.add_option("--put-start-discard-timeout-ms", c.put_start_discard_timeout_ms,
                 "Discard two-phase writes not committed within this (max 24 h)")
      ->capture_default_str();
  app.add_option("--soft-pin-ttl-ms", c.soft_pin_ttl_ms, "Default soft pin duration (max 24 h)")
      ->capture_default_str();
  app.add_option("--hard-pin-write-through", c.hard_pin_write_through,
                 "Also write hard-pinned DRAM objects to SSD so they survive a restart")
      ->capture_default_str();
  app.add_option("--inter-node-eviction", c.inter_node_eviction,
                 "Move cold objects to other nodes when the last tier is full")
      ->capture_default_str();
  app.add_option("--adopt-confirm-delay-ms", c.adopt_confirm_delay_ms,
                 "Check an adopted object's owner at the master after this long (max 24 h)")
      ->capture_default_str();
  app.add_option("--rdma", c.rdma,
                 "RDMA for inter-node moves: auto (use a device if present), on (require "
                 "one), off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--rdma-device", c.rdma_device, "RDMA device name (default: the first one)");
  app.add_option("--rdma-port", c.rdma_port, "1-based port of the RDMA device")
      ->capture_default_str();
  app.add_option("--rdma-gid-index", c.rdma_gid_index,
                 "GID index (-1 picks the first RoCE v2 IPv4-mapped GID, else 0)")
      ->capture_default_str();
  app.add_option("--test-crash-at", c.test_crash_at,
                 "Test hook: kill this worker at a step of an outgoing move "
                 "(after_adopt, after_hand_over), or lose the master's answer to its "
                 "hand-over (hand_over_answer_lost)")
      ->group("");  // hidden from --help: not for production
  app.add_option("--test-announce-delay-ms", c.test_announce_delay_ms,
                 "Test hook: wait this long between listing the keys to announce and "
                 "announcing them")
      ->group("");  // hidden from --help: not for production
  app.add_option("--ready-file", c.ready_file,
                 "Once registered with the master, write two lines here (atomically): the "
                 "bound RPC port, then the bound admin port (-1 if disabled)");
  AddAdminOptions(app, {c.admin_host, c.admin_port, c.admin_token, c.admin_token_file});
  AddRpcServerOptions(app, c.rpc_limits);
  AddTlsOptions(app, c.tls);
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.set_config("--config", "", "Read these options from a TOML/INI file (same key names)")
      ->type_name("FILE");
  // Quoted values keep a '#' (common/config_file.h).
  UseConfigFileFormat(app);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", VersionLine("mooncake-worker"),
                       "Print the version, git commit, build type and compiled-in GPU/RDMA "
                       "support, then exit");
}

// --master: "HOST:PORT" or "[IPV6]:PORT", split as every master address is
// (the brackets are not part of the host the resolver takes).
bool ParseHostPort(const std::string& text, std::string* host, int* port) {
  auto split = SplitMasterAddress(text);
  if (!split) return false;
  if (host) *host = std::move(split->first);
  if (port) *port = split->second;
  return true;
}

// Why a tier of `bytes` is too small to be meant, or too large to register;
// empty when it is fine. 0 (no tier) is checked elsewhere.
std::string TierCapacityProblem(const std::string& flag, uint64_t bytes) {
  if (bytes > kMaxTierCapacity) {
    return flag + " " + std::to_string(bytes) + " bytes is more than a tier can hold: at most " +
           std::to_string(kMaxTierCapacity) + " bytes (" + FormatBytes(kMaxTierCapacity) +
           ", 2^63 - 1, what registration with the master carries)";
  }
  if (bytes == 0 || bytes >= kMinTierCapacity) return "";
  std::string text = flag + " " + std::to_string(bytes) + " is " + std::to_string(bytes) +
                     " bytes; a tier must hold at least " + FormatBytes(kMinTierCapacity);
  if (flag != "--dram-capacity") text += " (or be 0 for none)";
  // A small bare number is most likely a count of MiB without its unit.
  if (bytes < 1024) text += "; did you mean " + std::to_string(bytes) + "MiB?";
  return text;
}

// Whether `flag` is among the command-line arguments, as `--flag VALUE` or
// `--flag=VALUE` (not after `--`): CLI11 2.1 counts a config file's key
// and a flag alike.
bool OnCommandLine(int argc, const char* const* argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == flag || (arg.starts_with(flag) && arg.substr(flag.size()).starts_with('='))) {
      return true;
    }
  }
  return false;
}

// Where --master, --etcd and --master-shards were given, lowest first.
enum class Source { kNone, kEnvironment, kFile, kFlag };

// --master, --etcd and --master-shards say one thing, where the master is,
// so they are one setting: the highest source that gives any of them (a
// flag, then a config file key, then MOONCAKE_MASTER / MOONCAKE_ETCD /
// MOONCAKE_MASTER_SHARDS) decides, and what a lower source gives is
// dropped. Otherwise MOONCAKE_ETCD set for a host's clients beat an
// explicit --master and the worker joined another cluster. Within one
// source, etcd or shards win over master (WorkerConfig).
void ResolveMasterAddress(const CLI::App& app, int argc, const char* const* argv, WorkerConfig& c) {
  const WorkerConfig defaults;
  struct Setting {
    const char* flag;
    const char* env;
    std::string* value;
    const std::string& fallback;
    Source source = Source::kNone;
  };
  Setting settings[] = {
      {"--master", "MOONCAKE_MASTER", &c.master, defaults.master},
      {"--etcd", "MOONCAKE_ETCD", &c.etcd, defaults.etcd},
      {"--master-shards", "MOONCAKE_MASTER_SHARDS", &c.master_shards, defaults.master_shards}};
  Source highest = Source::kNone;
  for (Setting& s : settings) {
    const char* env = std::getenv(s.env);
    if (OnCommandLine(argc, argv, s.flag)) {
      s.source = Source::kFlag;
    } else if (app.get_option(s.flag)->count() > 0) {
      s.source = Source::kFile;
    } else if (env && *env) {
      s.source = Source::kEnvironment;
      *s.value = env;
    }
    highest = std::max(highest, s.source);
  }
  for (Setting& s : settings) {
    if (s.source < highest) *s.value = s.fallback;
  }
}

}  // namespace

std::string WorkerConfig::master_description() const {
  if (!master_shards.empty()) return "shards " + master_shards;
  return etcd.empty() ? master : "etcd " + etcd + " cluster " + cluster_name;
}

std::string WorkerConfig::master_host() const {
  std::string host;
  ParseHostPort(master, &host, nullptr);
  return host;
}

int WorkerConfig::master_port() const {
  int port = 0;
  ParseHostPort(master, nullptr, &port);
  return port;
}

Result<void> ValidateWorkerConfig(const WorkerConfig& c, std::string* message) {
  auto fail = [&](std::string text) {
    SetMessage(message, std::move(text));
    return Err(ErrorCode::kInvalidParams);
  };
  if (c.host.empty()) return fail("--host must not be empty");
  if (c.port < 0 || c.port > 65535) return fail("--port must be in 0..65535");
  // Checked only when used: with etcd or shards it names nothing.
  if (c.etcd.empty() && c.master_shards.empty() && !ParseHostPort(c.master, nullptr, nullptr)) {
    return fail("--master must be HOST:PORT, got \"" + c.master + "\"");
  }
  if (!c.etcd.empty() && !ParseEtcdEndpoints(c.etcd)) {
    return fail("--etcd must be http://HOST:PORT[,http://HOST:PORT...], got \"" + c.etcd + "\"");
  }
  if (c.cluster_name.empty() || c.cluster_name.find('/') != std::string::npos) {
    return fail("--cluster-name must be non-empty and hold no '/'");
  }
  if (!c.master_shards.empty()) {
    if (!c.etcd.empty()) return fail("--master-shards and --etcd are exclusive");
    std::string why;
    if (!ParseMasterShards(c.master_shards, &why)) return fail("--master-shards: " + why);
  }
  if (c.dram_capacity == 0) return fail("--dram-capacity must be positive");
  // A bare number is bytes: "--dram-capacity 64" would start a worker that
  // is ready but cannot store anything.
  for (auto [flag, bytes] :
       {std::pair{"--dram-capacity", c.dram_capacity}, std::pair{"--ssd-capacity", c.ssd_capacity},
        std::pair{"--vram-capacity", c.vram_capacity}}) {
    if (auto problem = TierCapacityProblem(flag, bytes); !problem.empty()) return fail(problem);
  }
  if (c.ssd_capacity > 0 && c.ssd_path.empty()) return fail("--ssd-path must not be empty");
  if (c.gpu_device < 0) return fail("--gpu-device must not be negative");
  if (!(c.low_watermark > 0 && c.low_watermark < c.high_watermark && c.high_watermark <= 1.0)) {
    return fail("watermarks must satisfy 0 < --low-watermark < --high-watermark <= 1");
  }
  // Upper bounds keep deadlines (now + interval) from overflowing.
  if (c.heartbeat_interval_ms <= 0 || c.heartbeat_interval_ms > 3600ll * 1000) {
    return fail("--heartbeat-interval-ms must be in 1..3600000 (1 h)");
  }
  if (c.kv_lease_ttl_ms < 0 || c.kv_lease_ttl_ms > 24ll * 3600 * 1000) {
    return fail("--kv-lease-ttl-ms must be in 0..86400000 (24 h)");
  }
  if (c.soft_pin_ttl_ms <= 0 || c.soft_pin_ttl_ms > 24ll * 3600 * 1000) {
    return fail("--soft-pin-ttl-ms must be in 1..86400000 (24 h)");
  }
  if (c.adopt_confirm_delay_ms <= 0 || c.adopt_confirm_delay_ms > 24ll * 3600 * 1000) {
    return fail("--adopt-confirm-delay-ms must be in 1..86400000 (24 h), got " +
                std::to_string(c.adopt_confirm_delay_ms));
  }
  if (!ParseRdmaMode(c.rdma)) return fail("--rdma must be auto, on or off");
  if (c.rdma_port < 1 || c.rdma_port > 255) return fail("--rdma-port must be in 1..255");
  if (c.rdma_gid_index < -1) return fail("--rdma-gid-index must be -1 (pick) or >= 0");
  if (!ParseCrashPoint(c.test_crash_at)) {
    return fail("--test-crash-at must be after_adopt, after_hand_over or hand_over_answer_lost");
  }
  if (c.test_announce_delay_ms < 0 || c.test_announce_delay_ms > 10000) {
    return fail("--test-announce-delay-ms must be in 0..10000");
  }
  // A larger value overflowed the write path's deadline into the past: every
  // two-phase write was discarded as soon as it started.
  if (c.put_start_discard_timeout_ms <= 0 || c.put_start_discard_timeout_ms > 24ll * 3600 * 1000) {
    return fail("--put-start-discard-timeout-ms must be in 1..86400000 (24 h), got " +
                std::to_string(c.put_start_discard_timeout_ms));
  }
  if (auto problem = AdminSettingsProblem(c.admin_host, c.admin_port, c.port, c.admin_token);
      !problem.empty()) {
    return fail(problem);
  }
  if (spdlog::level::from_str(c.log_level) == spdlog::level::off && c.log_level != "off") {
    return fail("--log-level must be one of trace, debug, info, warn, error, critical, off");
  }
  if (auto limits = ValidateRpcServerLimits(c.rpc_limits, message); !limits) return limits;
  return ValidateTlsSettings(c.tls, message);
}

Result<WorkerConfig> ParseWorkerConfig(int argc, const char* const* argv, std::string* message) {
  WorkerConfig config;
  CLI::App app("mooncake-worker: one node's tiered storage (VRAM, DRAM, SSD)", "mooncake-worker");
  AddOptions(app, config);
  app.footer(
      "Exit codes: 0 stopped cleanly, 1 cannot start, 2 bad configuration, 4 the SSD tier\n"
      "cannot be opened (a corrupt, locked or unreadable RocksDB directory under --ssd-path;\n"
      "a missing or empty directory starts an empty SSD tier).\n"
      "Environment: MOONCAKE_MASTER (--master), MOONCAKE_ETCD (--etcd), MOONCAKE_MASTER_SHARDS\n"
      "(--master-shards), MOONCAKE_NODE_ID\n"
      "(--node-id). Precedence:\n"
      "a flag, then a --config file key, then the environment variable, then the default.\n"
      "--master, --etcd and --master-shards are one setting, where the master is: the first\n"
      "of those sources that gives any of them decides, and the others' values are ignored.");
  bool help = false;
  if (auto parsed = ParseFlags(app, argc, argv, &help, message); !parsed)
    return Err(parsed.error());
  if (help) {
    WorkerConfig shown;
    shown.show_help = true;
    return shown;
  }
  ResolveMasterAddress(app, argc, argv, config);
  // A token read from a file must pass the same checks as one from a flag.
  // Read with a bound: `--admin-token-file /dev/zero` is a config error.
  if (config.admin_token.empty() && !config.admin_token_file.empty()) {
    auto token = ReadAdminTokenFile(config.admin_token_file);
    if (!token) {
      SetMessage(message, token.error());
      return Err(ErrorCode::kInvalidParams);
    }
    config.admin_token = std::move(*token);
  }
  if (auto valid = ValidateWorkerConfig(config, message); !valid) return Err(valid.error());
  return config;
}

}  // namespace mooncake
