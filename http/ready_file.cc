#include "http/ready_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace mooncake {

namespace {

std::string ReadyFileText(std::span<const int> ports) {
  std::string text;
  for (int port : ports) text += std::to_string(port) + '\n';
  return text;
}

}  // namespace

Result<void> WriteReadyFilePorts(const std::string& path, std::span<const int> ports) {
  // The pid keeps two processes given the same path from sharing a temp file.
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Err(ErrorCode::kInvalidParams);
    out << ReadyFileText(ports);
    if (!out.flush()) {
      std::filesystem::remove(tmp);
      return Err(ErrorCode::kInternalError);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Err(ErrorCode::kInternalError);
  }
  return {};
}

bool RemoveReadyFileIfOurs(const std::string& path, std::span<const int> ports) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (text != ReadyFileText(ports)) return false;
  std::error_code ec;
  return std::filesystem::remove(path, ec);
}

}  // namespace mooncake
