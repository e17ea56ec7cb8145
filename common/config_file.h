#pragma once

// The reader of every binary's --config file (TOML `key = value` lines; the
// CLI's cli.toml too). CLI11 2.1's own reader cuts a value at its first '#',
// inside quotes or not, keeps the opening quote, and decodes escapes only
// in values that hold a space or a comma, and then only \" : `ssd-path =
// "/nvme#1/ssd"` became `"/nvme`, `admin-token = "s3cr\\et"` kept two
// backslashes, and the process ran with them. This reader strips comments
// as TOML does, at a '#' outside quotes, decodes every quoted value itself
// (a basic "..." string's escapes; a literal '...' string verbatim), and
// hands CLI11 only a placeholder for it, so CLI11 neither cuts nor splits
// nor re-decodes the value. A string still open at the end of its line, an
// unknown escape, or a multi-line string is an error naming the line, never
// a value silently changed; so is a file over kMaxConfigFileBytes
// (common/file_read.h).
//
// Header-only, like flag_parsing.h: only code that links CLI11 includes it.
// Thread-safety: stateless.

#include <CLI/CLI.hpp>
#include <cstdint>
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

[[noreturn]] inline void Fail(int line_no, const std::string& what) {
  throw CLI::ConfigError(std::string(kConfigFileError) + "line " + std::to_string(line_no) + ": " +
                         what);
}

// What CLI11 sees in place of the quoted value numbered `index`. A NUL byte
// never comes from the file (it is refused) and CLI11 neither trims nor
// splits at one, so no file text can look like a placeholder.
inline std::string Placeholder(size_t index) {
  return std::string(1, '\0') + std::to_string(index) + std::string(1, '\0');
}

inline int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline void AppendUtf8(uint32_t code, std::string* out) {
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xC0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    *out += static_cast<char>(0xE0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (code >> 18));
    *out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// The \uXXXX or \UXXXXXXXX escape whose digits start `digits`, as UTF-8.
inline void AppendUnicodeEscape(std::string_view digits, char kind, int line_no, std::string* out) {
  const size_t count = kind == 'u' ? 4 : 8;
  uint32_t code = 0;
  for (size_t i = 0; i < count; ++i) {
    const int digit = i < digits.size() ? HexDigit(digits[i]) : -1;
    if (digit < 0) {
      Fail(line_no,
           std::string("the escape \\") + kind + " needs " + std::to_string(count) + " hex digits");
    }
    code = code * 16 + static_cast<uint32_t>(digit);
  }
  if (code == 0 || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
    Fail(line_no, std::string("the escape \\") + kind + std::string(digits.substr(0, count)) +
                      " is not a character a value can hold");
  }
  AppendUtf8(code, out);
}

// The value of a TOML basic string whose text between the quotes is `body`.
inline std::string DecodeBasicString(std::string_view body, int line_no) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out += body[i];
      continue;
    }
    const char kind = ++i < body.size() ? body[i] : '\0';
    switch (kind) {
      case '\\':
        out += '\\';
        break;
      case '"':
        out += '"';
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u':
      case 'U':
        AppendUnicodeEscape(body.substr(i + 1), kind, line_no, &out);
        i += kind == 'u' ? 4 : 8;
        break;
      default:
        Fail(line_no, std::string("invalid escape \\") + kind +
                          " in a double-quoted string (TOML escapes: \\\\ \\\" \\b \\t \\n \\f "
                          "\\r \\uXXXX \\UXXXXXXXX); for a value with backslashes, such as "
                          "a Windows path, use single quotes: 'C:\\dir'");
    }
  }
  return out;
}

// `line` made ready for CLI11: its comment dropped and each quoted value
// (after the line's '=', or on a line inside a multi-line [array]) replaced
// by Placeholder(n), its decoded value appended to *values as values[n].
// *in_array carries an array still open at the end of the line.
inline std::string PrepareLine(std::string_view line, int line_no, bool* in_array,
                               std::vector<std::string>* values) {
  size_t first = line.find_first_not_of(" \t");
  // CLI11 skips lines that start with ';' (INI comments): so does this.
  if (first != std::string_view::npos && line[first] == ';') return {};
  std::string out;
  out.reserve(line.size());
  // Quoted text before the '=' is a key: CLI11 unquotes it as before.
  bool in_value = *in_array;
  // Whether a quote here opens a string: at the start of the line or of a
  // value (after '=', '[', ',' or a blank). Elsewhere (`o'brien`) it is
  // just a character, as before.
  bool token_start = true;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\0') Fail(line_no, "holds a NUL byte: not a text file");
    if (c == '#') break;
    if ((c == '"' || c == '\'') && token_start) {
      if (line.substr(i, 3) == std::string(3, c)) {
        Fail(line_no, std::string("multi-line strings (") + std::string(3, c) +
                          ") are not supported: write the value on one line");
      }
      size_t close = i + 1;
      while (close < line.size() && line[close] != c) {
        if (line[close] == '\0') Fail(line_no, "holds a NUL byte: not a text file");
        close += c == '"' && line[close] == '\\' ? 2 : 1;  // an escaped character
      }
      if (close >= line.size()) {
        Fail(line_no, std::string("the string opened with ") + c +
                          " is not closed on its line (a '#' inside quotes is part of the "
                          "value, not a comment)");
      }
      std::string_view body = line.substr(i + 1, close - i - 1);
      if (in_value) {
        values->push_back(c == '"' ? DecodeBasicString(body, line_no) : std::string(body));
        out += Placeholder(values->size() - 1);
      } else {
        out += line.substr(i, close - i + 1);
      }
      i = close;
      token_start = false;
      continue;
    }
    if (c == '=' && !in_value) {
      in_value = true;
      size_t next = line.find_first_not_of(" \t", i + 1);
      *in_array = next != std::string_view::npos && line[next] == '[';
    }
    out += c;
    token_start = c == '=' || c == '[' || c == ',' || c == ' ' || c == '\t';
  }
  // CLI11 reads an array's lines until one ends with ']'.
  if (*in_array) {
    size_t last = out.find_last_not_of(" \t\r");
    if (last != std::string::npos && out[last] == ']') *in_array = false;
  }
  return out;
}

// `input` with each Placeholder(n) in it replaced by values[n].
inline std::string ResolvePlaceholders(const std::string& input,
                                       const std::vector<std::string>& values) {
  if (input.find('\0') == std::string::npos) return input;
  std::string out;
  for (size_t i = 0; i < input.size(); ++i) {
    size_t close = input[i] == '\0' ? input.find('\0', i + 1) : std::string::npos;
    if (close == std::string::npos) {
      out += input[i];
      continue;
    }
    out += values.at(std::stoul(input.substr(i + 1, close - i - 1)));
    i = close;
  }
  return out;
}

}  // namespace config_file_detail

// A config file's text ready for CLI11's reader: comments gone, line for
// line (line numbers keep), each quoted value a placeholder for values[n].
struct PreparedConfigText {
  std::string text;
  std::vector<std::string> values;
};

// Throws CLI::ConfigError for a string left open at the end of its line,
// an invalid escape, a multi-line string or a NUL byte.
inline PreparedConfigText PrepareConfigText(std::string_view text) {
  PreparedConfigText prepared;
  prepared.text.reserve(text.size());
  bool in_array = false;
  int line_no = 1;
  for (size_t pos = 0;; ++line_no) {
    size_t eol = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    prepared.text += config_file_detail::PrepareLine(line, line_no, &in_array, &prepared.values);
    if (eol == std::string_view::npos) break;
    prepared.text += '\n';
    pos = eol + 1;
  }
  return prepared;
}

// CLI11's TOML reader behind PrepareConfigText.
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
    PreparedConfigText prepared = PrepareConfigText(text);
    std::istringstream stripped(prepared.text);
    // CLI11's reader on the prepared text, cutting at no comment character:
    // '\n' never reaches it inside a line, and every '#' left is inside a
    // placeholder's value, which it never sees.
    CLI::ConfigBase reader = *this;
    reader.comment('\n');
    std::vector<CLI::ConfigItem> items = reader.from_config(stripped);
    for (CLI::ConfigItem& item : items) {
      for (std::string& value : item.inputs) {
        value = config_file_detail::ResolvePlaceholders(value, prepared.values);
      }
    }
    return items;
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
