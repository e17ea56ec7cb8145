#pragma once

// What was built: the project version, the git commit, the build type and
// which optional device support is compiled in. Every binary's --version,
// the admin servers' /version and the mooncake_build_info metric report it.
//
// Thread-safety: constants.

#include <string>
#include <string_view>

namespace mooncake {

struct BuildInfo {
  std::string_view version;     // the CMake project version, e.g. "0.1.0"
  std::string_view commit;      // short git commit at build time, or "unknown"
  std::string_view build_type;  // CMAKE_BUILD_TYPE
  bool gpu = false;             // the VRAM tier (HIP) is compiled in
  bool rdma = false;            // the RDMA transport (ibverbs) is compiled in
};

const BuildInfo& GetBuildInfo();

// One line for --version: "<program> 0.1.0 (commit abc1234, RelWithDebInfo,
// gpu: no, rdma: yes)".
std::string VersionLine(std::string_view program);

}  // namespace mooncake
