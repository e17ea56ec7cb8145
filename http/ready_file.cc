#include "http/ready_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace mooncake {

Result<void> WriteReadyFilePorts(const std::string& path, std::span<const int> ports) {
  // The pid keeps two processes given the same path from sharing a temp file.
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Err(ErrorCode::kInvalidParams);
    for (int port : ports) out << port << '\n';
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

}  // namespace mooncake
