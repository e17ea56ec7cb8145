#pragma once

// The one way mooncake-master and mooncake-worker turn argv into their config
// struct and react to the outcome: a bad flag becomes a message and exit code
// 2, --help and --version print to stdout and exit 0, and nothing throws out
// of CLI11. CLI11's terse errors are reworded to name the key and the
// expected form (ExplainParseError).
// Header-only: only the config parsers and the mains include it, and they
// link CLI11.

#include <CLI/CLI.hpp>
#include <cctype>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "common/config_file.h"
#include "common/status.h"

namespace mooncake {

// CLI11's message for `e`, reworded where it is terse: an unknown key in a
// config file names the file, the key and the key form ("node_id" ->
// `config file w.toml: unknown key "node_id" (keys are the long flag names
// without dashes, e.g. node-id)`; a "[section]" or "a.b" key says sections are
// not supported), and a value that does not convert names
// the flag, the expected form and the value (`--port: expected an integer,
// got "abc"`). Other messages pass through.
inline std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (e.get_name() == "ConfigError") {
    // The file reader's own errors (common/config_file.h): an unclosed
    // string, a NUL byte.
    if (what.starts_with(kConfigFileError)) return NameConfigFile(app, what);
    constexpr std::string_view kExtras = "INI was not able to parse ";
    if (!what.starts_with(kExtras)) return what;
    std::string key = what.substr(kExtras.size());
    std::string file = "(--config)";
    if (const CLI::Option* config = app.get_config_ptr(); config && config->count() > 0) {
      file = config->as<std::string>();
    }
    // CLI11 reads "[worker]" as the key "worker.++" (and its end as
    // "worker.--"), and "worker.port = 1" as "worker.port": all keys live at
    // the top level of the file.
    if (auto dot = key.find('.'); dot != std::string::npos && dot > 0) {
      std::string section = key.substr(0, dot);
      std::string rest = key.substr(dot + 1);
      if (rest == "++" || rest == "--") rest = "";
      return "config file " + file + ": sections are not supported (found [" + section + "]" +
             (rest.empty() ? std::string() : " with key \"" + rest + "\"") +
             "); write every key at the top level of the file, with no [section] line and no "
             "\"section.\" prefix";
    }
    // Suggest the flag the key most likely meant: '_' for '-', lower case.
    std::string guess = key;
    for (char& c : guess) {
      c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const bool known = app.get_option_no_throw("--" + guess) != nullptr;
    return "config file " + file + ": unknown key \"" + key +
           "\" (keys are the long flag names without dashes, e.g. " +
           (known ? guess : std::string("log-level")) + ")";
  }
  if (e.get_name() == "ConversionError") {
    // "Could not convert: --port = abc"
    constexpr std::string_view kConvert = "Could not convert: ";
    auto eq = what.find(" = ");
    if (!what.starts_with(kConvert) || eq == std::string::npos) return what;
    std::string name = what.substr(kConvert.size(), eq - kConvert.size());
    std::string value = what.substr(eq + 3);
    std::string expected = "a valid value";
    if (const CLI::Option* opt = app.get_option_no_throw(name)) {
      const std::string type = opt->get_type_name();
      if (type == "INT" || type == "UINT") {
        expected = "an integer";
      } else if (type == "FLOAT") {
        expected = "a number like 0.5";
      } else if (type == "BOOLEAN") {
        expected = "true or false";
      } else if (type == "SIZE") {
        expected = "a size like 64MiB";
      }
    }
    return name + ": expected " + expected + ", got \"" + value + "\"";
  }
  return what;
}

// Parses argv into the options registered on `app`. With --help (or
// --version, when the app has app.set_version_flag), sets *help and puts the
// text for stdout in *message; with a bad flag, returns kInvalidParams and
// puts the reason (ExplainParseError) in *message.
inline Result<void> ParseFlags(CLI::App& app, int argc, const char* const* argv, bool* help,
                               std::string* message) {
  *help = false;
  try {
    app.parse(argc, argv);
    return {};
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    // CallForHelp and CallForVersion exit with Success and print to `out`.
    *help = app.exit(e, out, err) == static_cast<int>(CLI::ExitCodes::Success);
    if (*help) {
      if (message) *message = out.str();
      return {};
    }
    if (message) {
      *message = ExplainParseError(app, e) + "\n";
      // CLI11 follows its message with a "Run with --help" hint; keep it.
      if (err.str().find("Run with --help") != std::string::npos) {
        *message += "Run with --help for more information.\n";
      }
    }
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
