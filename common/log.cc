#include "common/log.h"

namespace mooncake {

bool SetLogLevel(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") return false;
  spdlog::set_level(parsed);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  return true;
}

}  // namespace mooncake
