#pragma once

// The one way mooncake-master and mooncake-worker turn argv into their config
// struct and react to the outcome: a bad flag becomes a message and exit code
// 2, --help prints the help and exits 0, and nothing throws out of CLI11.
// Header-only: only the config parsers and the mains include it, and they
// link CLI11.

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "common/status.h"

namespace mooncake {

// Parses argv into the options registered on `app`. With --help, sets *help
// and puts the help text in *message; with a bad flag, returns
// kInvalidParams and puts the reason in *message.
inline Result<void> ParseFlags(CLI::App& app, int argc, const char* const* argv, bool* help,
                               std::string* message) {
  *help = false;
  try {
    app.parse(argc, argv);
    return {};
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    *help = app.exit(e, out, err) == static_cast<int>(CLI::ExitCodes::Success);
    if (message) *message = *help ? out.str() : err.str();
    if (*help) return {};
  } catch (const std::exception& e) {
    // CLI11 reports through ParseError; anything else must still not escape.
    if (message) *message = std::string("cannot parse flags: ") + e.what() + "\n";
  }
  return Err(ErrorCode::kInvalidParams);
}

// For main(): after parsing a config that has `show_help`, the exit code to
// return at once (2 and the problem on stderr, or 0 and the help on
// stdout), or nullopt to go on.
template <typename Config>
std::optional<int> ExitCodeAfterParse(const Result<Config>& config, const std::string& message) {
  if (!config) {
    std::cerr << message << (message.ends_with('\n') ? "" : "\n");
    return 2;
  }
  if (config->show_help) {
    std::cout << message;
    return 0;
  }
  return std::nullopt;
}

}  // namespace mooncake
