#include "common/file_read.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "common/units.h"

namespace mooncake {

std::string ReadAtMost(std::istream& in, size_t max_bytes) {
  std::string text;
  char buffer[1 << 16];
  while (text.size() <= max_bytes) {
    size_t want = std::min(sizeof(buffer), max_bytes + 1 - text.size());
    in.read(buffer, static_cast<std::streamsize>(want));
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (!in) break;
  }
  return text;
}

std::expected<std::string, std::string> ReadFileAtMost(const std::string& path, size_t max_bytes) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::unexpected("cannot read \"" + path + "\"" +
                           (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  std::string text = ReadAtMost(in, max_bytes);
  if (in.bad()) {
    return std::unexpected("cannot read \"" + path + "\"" +
                           (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  if (text.size() > max_bytes) {
    return std::unexpected("\"" + path + "\" holds more than " + FormatBytes(max_bytes));
  }
  return text;
}

std::expected<std::string, std::string> ReadAdminTokenFile(const std::string& path) {
  auto text = ReadFileAtMost(path, kMaxTokenFileBytes);
  if (!text) return std::unexpected("--admin-token-file: " + text.error());
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  std::string_view token = *text;
  size_t begin = token.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) {
    return std::unexpected("--admin-token-file: \"" + path + "\" is empty");
  }
  token = token.substr(begin, token.find_last_not_of(kSpace) - begin + 1);
  return std::string(token);
}

}  // namespace mooncake
