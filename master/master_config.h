#pragma once

// The master's settings, filled from flags and an optional config file in one
// place (ParseMasterConfig). Every field has a working default, so
// `mooncake-master` with no flags serves on 127.0.0.1:50051.
//
// Thread-safety: a plain value; ParseMasterConfig is reentrant.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mooncake {

struct MasterConfig {
  // Address the Thrift service binds to.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (see --ready-file).
  int port = 50051;
  // A worker silent for this long is declared dead and its keys dropped.
  int64_t node_ttl_ms = 10000;
  // If set, the bound port is written here once the master listens.
  std::string ready_file;
  // trace, debug, info, warn, error, critical or off.
  std::string log_level = "info";

  // Set by ParseMasterConfig when --help was given: `message` then holds the
  // help text, the other fields are defaults, and the caller should print it
  // to stdout and exit 0 without starting anything.
  bool show_help = false;
};

// Checks ranges: port in 0..65535, node_ttl_ms > 0, a known log level. On
// failure returns kInvalidParams and, if `message` is given, says why.
Result<void> ValidateMasterConfig(const MasterConfig& config, std::string* message);

// Parses command-line flags --host --port --node-ttl-ms --ready-file
// --log-level and --config FILE (TOML/INI, same key names as the flags; flags
// given on the command line win over the file). On a parse or validation
// error returns kInvalidParams with the reason in `*message`; on --help
// returns a config with show_help set and the help text in `*message`.
// `message` may be null.
Result<MasterConfig> ParseMasterConfig(int argc, const char* const* argv, std::string* message);

}  // namespace mooncake
