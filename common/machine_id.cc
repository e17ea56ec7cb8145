#include "common/machine_id.h"

#include <fstream>

namespace mooncake {

const std::string& MachineId() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    std::getline(in, text);
    return text;
  }();
  return id;
}

}  // namespace mooncake
