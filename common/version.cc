#include "common/version.h"

#include "git_commit.h"  // MOONCAKE_GIT_COMMIT, written at build time

namespace mooncake {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{.version = MOONCAKE_VERSION,
                              .commit = MOONCAKE_GIT_COMMIT,
                              .build_type = MOONCAKE_BUILD_TYPE,
                              .gpu = MOONCAKE_GPU_COMPILED != 0,
                              .rdma = MOONCAKE_RDMA_COMPILED != 0};
  return info;
}

std::string VersionLine(std::string_view program) {
  const BuildInfo& b = GetBuildInfo();
  std::string line(program);
  line += " ";
  line += b.version;
  line += " (commit ";
  line += b.commit;
  line += ", ";
  line += b.build_type;
  line += ", gpu: ";
  line += b.gpu ? "yes" : "no";
  line += ", rdma: ";
  line += b.rdma ? "yes" : "no";
  line += ")";
  return line;
}

}  // namespace mooncake
