#include "master/master_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <sstream>
#include <string_view>

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
  app.add_option("--ready-file", config.ready_file,
                 "Write the bound port to this file once listening");
  app.add_option("--log-level", config.log_level,
                 "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.set_config("--config", "", "Read these options from a TOML/INI file (same key names)")
      ->type_name("FILE");
  // A misspelt key in a config file should fail loudly, not be ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
}

}  // namespace

Result<void> ValidateMasterConfig(const MasterConfig& config, std::string* message) {
  if (config.host.empty()) {
    SetMessage(message, "--host must not be empty");
  } else if (config.port < 0 || config.port > 65535) {
    SetMessage(message, "--port must be in 0..65535, got " + std::to_string(config.port));
  } else if (config.node_ttl_ms <= 0) {
    SetMessage(message,
               "--node-ttl-ms must be positive, got " + std::to_string(config.node_ttl_ms));
  } else if (std::ranges::find(kLogLevels, config.log_level) == kLogLevels.end()) {
    SetMessage(message,
               "--log-level must be one of trace, debug, info, warn, error, critical, "
               "off; got \"" +
                   config.log_level + "\"");
  } else {
    return {};
  }
  return Err(ErrorCode::kInvalidParams);
}

Result<MasterConfig> ParseMasterConfig(int argc, const char* const* argv, std::string* message) {
  MasterConfig config;
  CLI::App app("mooncake-master: key -> node directory of the tiered cache", "mooncake-master");
  AddOptions(app, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out;
    std::ostringstream err;
    int code = app.exit(e, out, err);
    if (code == static_cast<int>(CLI::ExitCodes::Success)) {
      MasterConfig help;
      help.show_help = true;
      SetMessage(message, out.str());
      return help;
    }
    SetMessage(message, err.str());
    return Err(ErrorCode::kInvalidParams);
  } catch (const std::exception& e) {
    // CLI11 reports through ParseError; anything else must still not escape.
    SetMessage(message, std::string("cannot parse flags: ") + e.what() + "\n");
    return Err(ErrorCode::kInvalidParams);
  }
  if (auto valid = ValidateMasterConfig(config, message); !valid) return Err(valid.error());
  return config;
}

}  // namespace mooncake
