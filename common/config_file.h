#pragma once

// The reader of every binary's --config file (TOML `key = value` lines; the
// CLI's cli.toml too). CLI11 2.1's own reader cuts a value at its first '#',
// inside quotes or not, and keeps the opening quote: `ssd-path =
// "/nvme#1/ssd"` became `"/nvme`, `admin-token = "#secret"` the one
// character `"`, and the process ran with them. This reader strips comments
// as TOML does, at a '#' outside quotes, and hands the rest to CLI11's
// reader with its own comment cutting turned off, so a quoted value keeps
// every character. A string still open at the end of its line is an error:
// never a value silently made shorter; so is a file over kMaxConfigFileBytes
// (common/file_read.h).
//
// Header-only, like flag_parsing.h: only code that links CLI11 includes it.
// Thread-safety: stateless.

#include <CLI/CLI.hpp>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_read.h"
#include "common/units.h"

namespace mooncake {

// The start of every error message this reader throws (as CLI::ConfigError);
// NameConfigFile puts the file's name in.
inline constexpr std::string_view kConfigFileError = "config file: ";

namespace config_file_detail {

// `line` without its comment. `line_no` names it in errors.
inline std::string StripLine(std::string_view line, int line_no) {
  auto fail = [line_no](const std::string& what) {
    throw CLI::ConfigError(std::string(kConfigFileError) + "line " + std::to_string(line_no) +
                           ": " + what);
  };
  size_t first = line.find_first_not_of(" \t");
  // CLI11 skips lines that start with ';' (INI comments): so does this.
  if (first != std::string_view::npos && line[first] == ';') return {};
  char quote = 0;
  // Whether a quote here opens a string: at the start of the line or of a
  // value (after '=', '[', ',' or a blank). Elsewhere (`o'brien`) it is
  // just a character, as before.
  bool token_start = true;
  size_t end = 0;
  for (; end < line.size(); ++end) {
    const char c = line[end];
    if (c == '\0') fail("holds a NUL byte: not a text file");
    if (quote != 0) {
      if (quote == '"' && c == '\\') {
        ++end;  // an escaped character, a quote included
      } else if (c == quote) {
        quote = 0;
        token_start = false;
      }
      continue;
    }
    if (c == '#') break;
    if ((c == '"' || c == '\'') && token_start) {
      quote = c;
      continue;
    }
    token_start = c == '=' || c == '[' || c == ',' || c == ' ' || c == '\t';
  }
  if (quote != 0) {
    fail(std::string("the string opened with ") + quote +
         " is not closed on its line (a '#' inside quotes is part of the value, not a comment)");
  }
  return std::string(line.substr(0, end));
}

}  // namespace config_file_detail

// `text` with every comment removed, line for line (line numbers keep).
// Throws CLI::ConfigError for a string left open at the end of its line or
// a NUL byte.
inline std::string StripConfigComments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int line_no = 1;
  for (size_t pos = 0;; ++line_no) {
    size_t eol = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    out += config_file_detail::StripLine(line, line_no);
    if (eol == std::string_view::npos) break;
    out += '\n';
    pos = eol + 1;
  }
  return out;
}

// CLI11's TOML reader behind StripConfigComments.
class ConfigFileFormat : public CLI::ConfigBase {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    // Bounded: `--config /dev/zero` or a model file named by mistake is an
    // error, not an allocation until the process aborts.
    std::string text = ReadAtMost(input, kMaxConfigFileBytes);
    if (text.size() > kMaxConfigFileBytes) {
      throw CLI::ConfigError(std::string(kConfigFileError) + "holds more than " +
                             FormatBytes(kMaxConfigFileBytes) + ": not a config file");
    }
    std::istringstream stripped(StripConfigComments(text));
    // CLI11's reader on the stripped text, cutting at no comment character:
    // the only '#' left are inside quotes. NUL never reaches it.
    CLI::ConfigBase reader = *this;
    reader.comment('\0');
    return reader.from_config(stripped);
  }
};

// Makes `app` read its --config file with ConfigFileFormat.
inline void UseConfigFileFormat(CLI::App& app) {
  app.config_formatter(std::make_shared<ConfigFileFormat>());
}

// `message` with this reader's "config file: " made "config file PATH: ",
// PATH being the --config value of `app`; other messages unchanged.
inline std::string NameConfigFile(const CLI::App& app, std::string message) {
  if (!message.starts_with(kConfigFileError)) return message;
  std::string file = "(--config)";
  if (const CLI::Option* config = app.get_config_ptr(); config && config->count() > 0) {
    file = config->as<std::string>();
  }
  return "config file " + file + ": " + message.substr(kConfigFileError.size());
}

}  // namespace mooncake
